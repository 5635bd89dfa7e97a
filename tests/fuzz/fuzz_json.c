// tests/fuzz/fuzz_json.c: the config JSON of checkpoint metadata (config_from_json). When an
// input is accepted, the property checked is the round trip: writing the config back as JSON
// and reading that gives the same JSON again. The same bytes are then read as a sharded Hugging
// Face model's index (trainer/hf_weights.c: hf_shard_names, whose JSON reader also reads config.json):
// what it accepts is at least one name, each a plain file name (no '/', no '\\', no leading
// '.'), none twice; and as a config.json, the values transformers would read from it.
#include "fuzz.h"
#include "base/config.h"
#include "trainer/hf.h"
#include "trainer/hf_json.h"

static void check_shard_names(const uint8_t *data, size_t size) {
    jmp_buf jump;
    if (setjmp(jump)) { die_set_jump(NULL, 0); return; }
    die_set_jump(&jump, 1);
    int n = 0;
    char **names = hf_shard_names(fuzz_file(data, size), &n);
    die_set_jump(NULL, 0);
    if (n < 1) abort();
    for (int i = 0; i < n; i++) {
        if (!names[i][0] || names[i][0] == '.' || strchr(names[i], '/') || strchr(names[i], '\\')) {
            fprintf(stderr, "an index's file name accepted: '%s'\n", names[i]);
            abort();
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) { fprintf(stderr, "'%s' named twice\n", names[i]); abort(); }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static char json1[65536], json2[65536];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jmp_buf jump;
    char *s = fuzz_string(data, size);
    if (!setjmp(jump)) {
        die_set_jump(&jump, 1);
        Config c, d;
        config_defaults(&c);
        config_from_json(&c, s, "fuzz.safetensors");
        config_to_json(&c, json1, sizeof json1);
        config_defaults(&d);
        die_set_jump(NULL, 0);   // the config's own JSON must read back: a die here is a bug
        config_from_json(&d, json1, "round trip");
        config_to_json(&d, json2, sizeof json2);
        if (strcmp(json1, json2)) {
            fprintf(stderr, "round trip changed the config JSON:\n%s\n%s\n", json1, json2);
            abort();
        }
    }
    die_set_jump(NULL, 0);
    check_shard_names(data, size);
    // And as a config.json, the values transformers would read (trainer/hf_defaults.c: the
    // file's, a class's default, RoPE's parameters gathered): never a fault, whatever the text.
    static const char *const KEYS[] = {"rope_parameters", "head_dim", "num_key_value_heads", "vocab_size", "n_group",
                                       "topk_method"};
    char out[512];
    for (int i = 0; i < 6; i++) hf_config_value(s, KEYS[i], out, sizeof out);
    free(s);
    return 0;
}
