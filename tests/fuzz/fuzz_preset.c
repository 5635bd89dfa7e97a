// tests/fuzz/fuzz_preset.c: the preset reader, key=value overrides and the config checks.
// The input is a preset text, then (after the first NUL byte) key=value overrides separated
// by NUL bytes, as the command line would give them. When the checks accept a config, the
// property checked is the checkpoint's: its JSON (what a checkpoint's metadata keeps) reads
// back, the checks accept it again, and it writes the same JSON.
#include "trainer/step.h"
#include "fuzz.h"
#include "base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jmp_buf jump;
    const uint8_t *nul = memchr(data, 0, size);
    size_t text_n = nul ? (size_t)(nul - data) : size;
    char *rest = nul ? fuzz_string(nul + 1, size - text_n - 1) : NULL;
    size_t rest_n = nul ? size - text_n - 1 : 0;
    if (!setjmp(jump)) {
        die_set_jump(&jump, 1);
        Config c;
        config_defaults(&c);
        config_load_text(&c, (const char *)data, text_n, "fuzz.yml");
        for (size_t i = 0; i < rest_n; i += strlen(rest + i) + 1) {
            char *arg = rest + i, *eq = strchr(arg, '=');
            if (!eq) continue;
            *eq = '\0';
            config_set(&c, arg, eq + 1, "command line");
        }
        step_check_config(&c);
        static char json1[65536], json2[65536];
        config_to_json(&c, json1, sizeof json1);
        Config d;
        config_defaults(&d);
        die_set_jump(NULL, 0);   // an accepted config's own JSON must load and pass: a die here is a bug
        config_from_json(&d, json1, "round trip");
        step_check_config(&d);
        config_to_json(&d, json2, sizeof json2);
        if (strcmp(json1, json2)) {
            fprintf(stderr, "an accepted config's JSON changed on the way back:\n%s\n%s\n", json1, json2);
            abort();
        }
    }
    die_set_jump(NULL, 0);
    free(rest);
    return 0;
}
