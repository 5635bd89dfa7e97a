// tests/fuzz/fuzz_json.c: the config JSON of checkpoint metadata (config_from_json). When an
// input is accepted, the property checked is the round trip: writing the config back as JSON
// and reading that gives the same JSON again.
#include "fuzz.h"
#include "base/config.h"

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
    free(s);
    return 0;
}
