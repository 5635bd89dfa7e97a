// trainer/describe.c: the JSON of `./train describe` (trainer/describe.h):
//   {"config": {key: value, ...},
//    "params": {"decoder/...": [d0, d1, ...], ...},   the layout's order, global shapes
//    "state": {"...": [E], ...}}                       routing biases (routed_bias=true)
#include "trainer/describe.h"
#include "model/model.h"
#include "base/config.h"
#include "core/common.h"
#include "trainer/step.h"   // step_check_config: the checks a training run makes
#include <stdio.h>
#include <stdlib.h>

static void print_shape(const int *shape, int ndim) {
    printf("[");
    for (int d = 0; d < ndim; d++) printf("%s%d", d ? ", " : "", shape[d]);
    printf("]");
}

int describe_main(int argc, char **argv) {
    if (argc < 3) die("usage: ./train describe CONFIG.yml [key=value ...]");
    Config c;
    config_defaults(&c);
    config_load_file(&c, argv[2]);
    for (int i = 3; i < argc; i++) config_set_arg(&c, argv[i]);
    step_check_config(&c);
    static char json[16384];
    config_to_json(&c, json, sizeof json);
    int n = model_layout(&c, NULL, NULL);   // outside a mesh: the global shapes
    ParamSpec *specs = calloc((size_t)n, sizeof *specs);
    if (!specs) die("host out of memory describing %d tensors", n);
    model_layout(&c, specs, NULL);
    printf("{\"config\": %s,\n \"params\": {", json);
    for (int i = 0; i < n; i++) {
        printf("%s\n  \"%s\": ", i ? "," : "", specs[i].name);
        print_shape(specs[i].gshape, specs[i].ndim);
    }
    printf("},\n \"state\": {");
    for (int l = c.first_num_dense_layers, first = 1; c.routed_bias && l < c.base_num_decoder_layers; l++, first = 0) {
        char name[160];
        model_bias_name(&c, l, "", name, sizeof name);
        printf("%s\n  \"%s\": [%d]", first ? "" : ",", name, c.num_experts);
    }
    printf("}}\n");
    free(specs);
    return 0;
}
