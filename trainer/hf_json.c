// trainer/hf_json.c: a small reader for Hugging Face's JSON files (config.json, a sharded
// model's index): the raw text of an object's members, compared as JSON values. Enough for
// flat objects of numbers, strings, literals and nested objects; not a validating parser.
#include "trainer/hf_json.h"
#include "core/common.h"
#include <stdlib.h>
#include <string.h>

// p at a JSON value: returns the character after it (strings, numbers, literals, nesting).
static const char *skip_value(const char *p) {
    int depth = 0;
    do {
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) if (*p == '\\' && p[1]) p++;
            if (*p) p++;
        } else if (*p == '{' || *p == '[') { depth++; p++; }
        else if (*p == '}' || *p == ']') { depth--; p++; }
        else if (depth == 0) { while (*p && !strchr(",}] \t\r\n", *p)) p++; }
        else p++;
    } while (*p && depth > 0);
    return p;
}

// The next member of an object: *p inside the object (after '{' or a member); sets the
// key's text (k0, klen) and the value's (v0, v1). 0 at the end.
int json_next_member(const char **p, const char **k0, int *klen, const char **v0, const char **v1) {
    const char *q = *p;
    while (*q && strchr(" \t\r\n,", *q)) q++;
    if (*q != '"') return 0;
    const char *e = skip_value(q);
    *k0 = q + 1;
    *klen = (int)(e - q - 2);
    while (*e && strchr(" \t\r\n:", *e)) e++;
    *v0 = e;
    *p = *v1 = skip_value(e);
    return 1;
}

// Where the value of member `key` of the object at obj lies, [*v0, *v1); 0 if absent.
int json_member_at(const char *obj, const char *key, const char **v0, const char **v1) {
    const char *p = strchr(obj, '{'), *k0;
    int klen;
    if (!p) return 0;
    for (p++; json_next_member(&p, &k0, &klen, v0, v1);)
        if ((size_t)klen == strlen(key) && !strncmp(k0, key, (size_t)klen)) return 1;
    return 0;
}

// The value of member `key` of the object at obj, copied into out (raw text); 0 if absent.
int json_member(const char *obj, const char *key, char *out, size_t cap) {
    const char *v0, *v1;
    if (!json_member_at(obj, key, &v0, &v1)) return 0;
    snprintf(out, cap, "%.*s", (int)(v1 - v0), v0);
    return 1;
}

int json_repeated_member(const char *obj, const char **key, int *klen) {
    const char *p = strchr(obj, '{'), *k0, *v0, *v1, *q, *k1, *w0, *w1;
    int len, k1len;
    if (!p) return 0;
    for (p++; json_next_member(&p, &k0, &len, &v0, &v1);)
        for (q = p; json_next_member(&q, &k1, &k1len, &w0, &w1);)
            if (k1len == len && !strncmp(k0, k1, (size_t)len)) {
                *key = k0;
                *klen = len;
                return 1;
            }
    return 0;
}

void json_members_unique(const char *obj, const char *path, const char *who) {
    const char *k;
    int klen;
    if (json_repeated_member(obj, &k, &klen)) die("%s: %s gives \"%.*s\" twice", who, path, klen, k);
}

// Whether the raw JSON values a (wanted) and b (found) mean the same: numbers as floats,
// objects member by member of a, the rest as text without blanks.
int json_same(const char *a, const char *b) {
    if (*a == '{') {
        const char *p = a + 1, *k0, *v0, *v1;
        int klen;
        while (json_next_member(&p, &k0, &klen, &v0, &v1)) {
            char key[64], va[128], vb[128];
            snprintf(key, sizeof key, "%.*s", klen, k0);
            snprintf(va, sizeof va, "%.*s", (int)(v1 - v0), v0);
            if (!json_member(b, key, vb, sizeof vb) || !json_same(va, vb)) return 0;
        }
        return 1;
    }
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    if (ea != a && eb != b && !*ea && !*eb) return (float)x == (float)y;
    char ca[256], cb[256];
    int i = 0, j = 0;
    for (; *a && i < 255; a++) if (!strchr(" \t\r\n", *a)) ca[i++] = *a;
    for (; *b && j < 255; b++) if (!strchr(" \t\r\n", *b)) cb[j++] = *b;
    ca[i] = cb[j] = '\0';
    return !strcmp(ca, cb);
}

char *json_read_text(const char *path, const char *who) {
    FILE *f = fopen_regular(path, who);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) die("%s: cannot read '%s'", who, path);
    s[n] = '\0';
    fclose(f);
    return s;
}
