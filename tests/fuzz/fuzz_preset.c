// tests/fuzz/fuzz_preset.c: the preset reader, key=value overrides and the config checks.
// The input is a preset text, then (after the first NUL byte) key=value overrides separated
// by NUL bytes, as the command line would give them.
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
    }
    die_set_jump(NULL, 0);
    free(rest);
    return 0;
}
