// base/config.c: the key table made from base/config_keys.def, the preset-file reader,
// overrides, enum names, the JSON of checkpoint metadata and the consistency checks.
#include "base/config.h"
#include "core/common.h"
#include "base/paths.h"
#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <sys/stat.h>
#include <errno.h>
#include <stddef.h>

typedef enum { K_INT, K_FLOAT, K_BOOL, K_STR, K_BYTES, K_ENUM } KeyType;

// The names of every enum-valued key's values, and prefix_name() for each (config.h).
#define V(constant, name) name,
#define ENUM_TYPE(Type, prefix, values)                                                        \
    static const char *const Type##_names[] = {values};                                        \
    const char *prefix##_name(Type v) {                                                        \
        return (unsigned)v < sizeof Type##_names / sizeof Type##_names[0] ? Type##_names[v] : "?"; \
    }
#include "base/config_keys.def"
#undef V

// MaxText's names that an enum refuses, and why.
typedef struct {
    const char *const *names;   // the enum's names (which enum)
    const char *refused;        // space-separated
    const char *why;
} NotHere;
static const NotHere NOT_HERES[] = {
#define NOT_HERE(Type, refused, why) {Type##_names, refused, why},
#include "base/config_keys.def"
};

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;             // offsetof(Config, field)
    const char *dflt;          // default, as it would be written in a preset
    const char *help;          // one line of meaning
    const char *const *names;  // K_ENUM: the values' names, in the enum's order
    int nnames;
} KeyDef;

static const KeyDef KEYS[] = {
#define KEY(type, name, dflt, range, help) {#name, K_##type, offsetof(Config, name), dflt, help, NULL, 0},
#define ENUM(Type, name, dflt, help) \
    {#name, K_ENUM, offsetof(Config, name), dflt, help, Type##_names, sizeof Type##_names / sizeof Type##_names[0]},
#include "base/config_keys.def"
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

// Earlier names of keys, read as the key's present name.
typedef struct {
    const char *old, *name;
} Renamed;
static const Renamed RENAMES[] = {
#define RENAMED(old, name) {#old, #name},
#include "base/config_keys.def"
};

static const KeyDef *find_key_named(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

// The key of a name: its own, or the key an earlier name of it stands for.
static const KeyDef *find_key(const char *name) {
    const KeyDef *k = find_key_named(name);
    for (size_t i = 0; !k && i < sizeof RENAMES / sizeof RENAMES[0]; i++)
        if (strcmp(RENAMES[i].old, name) == 0) k = find_key_named(RENAMES[i].name);
    return k;
}

// Keys that checkpoint metadata written before them lacks; their defaults do what those
// versions did.
static const char *const SINCE_FORMAT_1_KEYS[] = {
#define SINCE_FORMAT_1(name) #name,
#include "base/config_keys.def"
};

static int since_format_1(const char *name) {
    for (size_t i = 0; i < sizeof SINCE_FORMAT_1_KEYS / sizeof SINCE_FORMAT_1_KEYS[0]; i++)
        if (!strcmp(SINCE_FORMAT_1_KEYS[i], name)) return 1;
    return 0;
}

// Edit distance, to suggest the closest valid key for a typo.
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            d[i][j] = MM_MIN(sub, MM_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1));
        }
    return d[la][lb];
}

// The key nearest name, if it is near enough to be a typo of it (at most a third of its
// letters changed, or two): NULL otherwise, where any suggestion would be a stray key.
static const char *closest_key(const char *name) {
    int n = (int)strlen(name), best = MM_MAX(2, n / 3) + 1;
    const char *bestname = NULL;
    for (int i = 0; i < NKEYS; i++) {
        if (abs(n - (int)strlen(KEYS[i].name)) >= best) continue;   // the distance is at least that
        int d = edit_distance(name, KEYS[i].name);
        if (d < best) { best = d; bestname = KEYS[i].name; }
    }
    return bestname;
}

// MaxText's keys that are something else here, and what.
typedef struct {
    const char *key, *here;
} Elsewhere;
static const Elsewhere ELSEWHERES[] = {
#define ELSEWHERE(key, here) {#key, here},
#include "base/config_keys.def"
};

// Whether word is one of the space-separated words of list.
static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; n > 0 && (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

// MaxText's keys with one meaning here (ONLY in base/config_keys.def).
typedef struct {
    const char *key, *values, *why;
} Only;
static const Only ONLYS[] = {
#define ONLY(key, values, why) {#key, values, why},
#include "base/config_keys.def"
};

// 1 if key is one of them and v one of its values (blanks and quotes left out: MaxText's
// files write ["silu","linear"]); dies naming the key if v is not; 0 for any other key.
static int only_value(const char *where, const char *key, const char *v) {
    for (size_t i = 0; i < sizeof ONLYS / sizeof ONLYS[0]; i++) {
        if (strcmp(ONLYS[i].key, key)) continue;
        char bare[256];
        size_t n = 0;
        for (const char *p = v; *p && n + 1 < sizeof bare; p++)
            if (!isspace((unsigned char)*p) && *p != '"' && *p != '\'') bare[n++] = *p;
        bare[n] = '\0';
        if (has_word(ONLYS[i].values, n ? bare : "\"\"")) return 1;   // (the empty value listed as "")
        die("%s: %s=%.200s is MaxText's, which meshmoe does not have: %s", where, key, v, ONLYS[i].why);
    }
    return 0;
}

// An unknown key: a MaxText key says what does its work here; for any other the closest
// valid one is suggested when the name could be a key at all (lowercase letters, digits
// and '_'), so that a stray byte is not compared with every key, and when it is near enough
// to be a typo ('bogus' is no misspelt 'steps').
static void die_unknown_key(const char *where, const char *key) {
    for (size_t i = 0; i < sizeof ELSEWHERES / sizeof ELSEWHERES[0]; i++)
        if (!strcmp(ELSEWHERES[i].key, key))
            die("%s: '%s' is a MaxText key that meshmoe does not have: %s", where, key, ELSEWHERES[i].here);
    size_t n = strlen(key);
    if (n > 0 && n < 64 && strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == n) {
        const char *near = closest_key(key);
        if (near)
            die("%s: unknown config key '%s' (did you mean '%s'? ./train --help-config lists them all)", where, key,
                near);
        die("%s: unknown config key '%s' (./train --help-config lists them all)", where, key);
    }
    die("%s: unknown config key '%.100s' (keys are lowercase letters, digits and '_'; ./train --help-config lists "
        "them all)", where, key);
}

// An enum key's names as a message lists them: 'a', 'b' or 'c' ("" for the empty name).
static void names_text(const KeyDef *k, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < k->nnames && n < cap; i++) {
        const char *sep = i == 0 ? "" : i == k->nnames - 1 ? " or " : ", ";
        const char *q = k->names[i][0] ? "'" : "";
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s%s", sep, q, k->names[i][0] ? k->names[i] : "\"\"", q);
    }
}

// The enum value that name v stands for; dies naming the key and its names.
static int enum_value(const KeyDef *k, const char *v, const char *where) {
    for (int i = 0; i < k->nnames; i++)
        if (!strcmp(v, k->names[i])) return i;
    char names[512];
    names_text(k, names, sizeof names);
    for (size_t i = 0; i < sizeof NOT_HERES / sizeof NOT_HERES[0]; i++)
        if (NOT_HERES[i].names == k->names && has_word(NOT_HERES[i].refused, v))
            die("%s: %s=%s is MaxText's, which meshmoe does not have: %s; use %s", where, k->name, v, NOT_HERES[i].why,
                names);
    int best = 3, near = -1;   // a name within two edits is suggested
    for (int i = 0; i < k->nnames; i++) {
        int d = edit_distance(v, k->names[i]);
        if (d < best) { best = d; near = i; }
    }
    if (near >= 0 && k->names[near][0])
        die("%s: %s must be %s, got '%.200s' (did you mean '%s'?)", where, k->name, names, v, k->names[near]);
    die("%s: %s must be %s, got '%.200s'", where, k->name, names, v);
}

// A number as MaxText's YAML files may write it, its digits grouped by '_' (1_000_000): the
// text without those underscores, each one between two digits (any other '_' stays, for the
// parse to refuse). A text too long for buf is returned as it is.
static const char *ungrouped(const char *v, char *buf, size_t cap) {
    if (!strchr(v, '_') || strlen(v) >= cap) return v;
    size_t n = 0;
    for (const char *p = v; *p; p++)
        if (!(*p == '_' && p > v && isdigit((unsigned char)p[-1]) && isdigit((unsigned char)p[1]))) buf[n++] = *p;
    buf[n] = '\0';
    return buf;
}

static void set_value(Config *c, const KeyDef *k, const char *text, const char *where) {
    char *end, digits[64];
    void *field = (char *)c + k->offset;
    const char *v = k->type == K_INT || k->type == K_FLOAT || k->type == K_BYTES ? ungrouped(text, digits, sizeof digits)
                                                                                   : text;
    switch (k->type) {
    case K_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (*v == '\0' || isspace((unsigned char)*v) || *end != '\0' || (errno && errno != ERANGE))
            die("%s: key '%s' wants an integer, got '%s'", where, k->name, text);
        if (errno == ERANGE || x < -2147483647L || x > 2147483647L)
            die("%s: key '%s' = %s is too large: an integer key holds at most 2147483647", where, k->name, text);
        *(int *)field = (int)x;
        break;
    }
    case K_FLOAT: {   // a 32-bit float: a value it cannot hold is refused, never rounded to inf or 0
        errno = 0;
        double x = strtod(v, &end);
        if (*v == '\0' || isspace((unsigned char)*v) || *end != '\0' || isnan(x))
            die("%s: key '%s' wants a number, got '%s'", where, k->name, text);
        if ((errno == ERANGE && x != 0) || fabs(x) > FLT_MAX)
            die("%s: key '%s' = %s is too large for a 32-bit float (largest %g)", where, k->name, text, (double)FLT_MAX);
        if (errno == ERANGE || (x != 0 && fabs(x) < FLT_MIN))
            die("%s: key '%s' = %s is too small for a 32-bit float (smallest nonzero %g)", where, k->name, text,
                (double)FLT_MIN);
        *(float *)field = (float)x;
        break;
    }
    case K_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *(int *)field = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *(int *)field = 0;
        else die("%s: key '%s' wants true or false, got '%s'", where, k->name, text);
        break;
    case K_BYTES: {   // a count of bytes, with an optional KB/MB/GB (1e3) or KiB/MiB/GiB (2^10) suffix
        errno = 0;
        double x = strtod(v, &end);
        const char *units[] = {"", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
        const double mult[] = {1, 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
        int u = -1;
        for (int i = 0; i < 10; i++)
            if (!strcmp(end, units[i])) u = i;
        if (*v == '\0' || isspace((unsigned char)*v) || u < 0 || errno || !(x >= 0) || x * mult[u] > 9e18)
            die("%s: key '%s' wants a byte count such as 80GB, 512MiB or 1000000, got '%s'", where, k->name, text);
        if (x * mult[u] != floor(x * mult[u]))
            die("%s: key '%s' = %s is not a whole number of bytes", where, k->name, text);
        *(int64_t *)field = (int64_t)(x * mult[u]);
        break;
    }
    case K_STR:
    case K_ENUM:
        if (strlen(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[strlen(v) - 1] == v[0]) {   // a quoted value: "" is empty
            char q[CFG_STR + 2];
            snprintf(q, sizeof q, "%.*s", (int)strlen(v) - 2, v + 1);
            set_value(c, k, q, where);
            return;
        }
        if (k->type == K_ENUM) { *(int *)field = enum_value(k, v, where); break; }
        if (strlen(v) >= CFG_STR) die("%s: value of '%s' is longer than %d characters", where, k->name, CFG_STR - 1);
        strcpy((char *)field, v);
        break;
    }
}

void config_set(Config *c, const char *key, const char *value, const char *where) {
    const KeyDef *k = find_key(key);
    if (!k && only_value(where, key, value)) return;
    if (!k) die_unknown_key(where, key);
    set_value(c, k, value, where);
}

void config_set_arg(Config *c, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq) die("argument '%s' is not key=value", arg);
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    config_set(c, key, eq + 1, "command line");
}

// ---- for the sweep: questions about the key table, so that the sweep's row list can be
// data (a row whose key this build lacks is reported as not implemented, never faked).
int config_has_key(const char *key) { return find_key(key) != NULL; }

int config_value_is(const Config *c, const char *key, const char *value) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_value_is: unknown key '%s'", key);
    Config t = *c;
    set_value(&t, k, value, "sweep");
    return memcmp(&t, c, sizeof t) == 0;
}

void config_format_value(const Config *c, const char *key, char *buf, int cap) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_format_value: unknown key '%s'", key);
    const void *field = (const char *)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, (size_t)cap, "%d", *(const int *)field); break;
    case K_FLOAT: snprintf(buf, (size_t)cap, "%g", (double)*(const float *)field); break;
    case K_BYTES: snprintf(buf, (size_t)cap, "%lld", (long long)*(const int64_t *)field); break;
    case K_BOOL: snprintf(buf, (size_t)cap, "%s", *(const int *)field ? "true" : "false"); break;
    case K_STR: snprintf(buf, (size_t)cap, "%s", *(const char *)field ? (const char *)field : "\"\""); break;   // "" shown as such
    case K_ENUM: {
        const char *name = k->names[*(const int *)field];
        snprintf(buf, (size_t)cap, "%s", name[0] ? name : "\"\"");
        break;
    }
    }
}

int config_num_keys(void) { return NKEYS; }
const char *config_key_name(int i) { return i >= 0 && i < NKEYS ? KEYS[i].name : NULL; }

int config_key_equal(const Config *a, const Config *b, const char *key) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_key_equal: unknown key '%s'", key);
    const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
    switch (k->type) {
    case K_INT: case K_BOOL: case K_ENUM: return *(const int *)fa == *(const int *)fb;
    case K_FLOAT: return memcmp(fa, fb, sizeof(float)) == 0;
    case K_BYTES: return *(const int64_t *)fa == *(const int64_t *)fb;
    case K_STR: return strcmp((const char *)fa, (const char *)fb) == 0;
    }
    return 0;
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < NKEYS; i++) set_value(c, &KEYS[i], KEYS[i].dflt, "default");
}

// Strip spaces at both ends, and matching quotes around a value.
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    size_t n = strlen(s);
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) { s[n - 1] = '\0'; s++; }
    return s;
}

// A '#' starts a comment at the start of a line or after a space or tab, outside a quoted
// value; elsewhere it is part of the value (dataset_path: runs/data#1.txt).
static void strip_comment(char *s) {
    char quote = 0;
    for (char *p = s; *p; p++) {
        int after_blank = p == s || p[-1] == ' ' || p[-1] == '\t';
        if (quote) { if (*p == quote) quote = 0; }
        else if ((*p == '"' || *p == '\'') && (after_blank || p[-1] == ':')) quote = *p;
        else if (*p == '#' && after_blank) { *p = '\0'; return; }
    }
}

// One `key: value` line. seen[k] is the line that set key k in this file (0: none yet).
static void load_line(Config *c, char *line, const char *path, int lineno, int *seen) {
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    strip_comment(line);
    char *s = trim(line);
    if (*s == '\0') return;
    char *colon = strchr(s, ':');
    if (!colon) die("%s: expected 'key: value', got '%.200s'", where, s);
    *colon = '\0';
    char *key = trim(s), *val = trim(colon + 1);
    const KeyDef *k = find_key(key);
    if (!k && only_value(where, key, val)) return;
    if (!k) die_unknown_key(where, key);
    if (seen[k - KEYS]) {
        char as[128] = "";   // the second line may name the key by its earlier name
        if (strcmp(key, k->name)) snprintf(as, sizeof as, " (line %d as '%.60s', its earlier name)", lineno, key);
        die("%s: key '%s' is set twice in this file, on lines %d and %d%s (a preset sets each key once; "
            "the command line may override it)", path, k->name, seen[k - KEYS], lineno, as);
    }
    seen[k - KEYS] = lineno;
    set_value(c, k, val, where);
}

void config_load_text(Config *c, const char *text, size_t n, const char *path) {
    int seen[NKEYS];
    memset(seen, 0, sizeof seen);
    size_t i = 0;
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) i = 3;   // a UTF-8 byte-order mark is skipped
    char line[1024];
    for (int lineno = 1; i < n; lineno++) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) : n - i;
        if (len >= sizeof line) die("%s:%d: line too long (%zu bytes, at most %zu)", path, lineno, len, sizeof line - 1);
        if (memchr(text + i, '\0', len)) die("%s:%d: the line holds a NUL byte (is this a text file?)", path, lineno);
        memcpy(line, text + i, len);
        line[len] = '\0';
        i += len + 1;
        load_line(c, line, path, lineno, seen);
    }
}

void config_load_file(Config *c, const char *path) {
    FILE *f = fopen_input(path);
    if (!f) die("cannot open config file '%s': %s", path, strerror(errno));
    struct stat st;
    const size_t max = 1 << 20;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        fclose(f);
        if (S_ISDIR(st.st_mode)) die("config file '%s' is a directory; give a preset such as configs/mixtral-tiny.yml", path);
        if (!S_ISREG(st.st_mode)) die("config file '%s' is not a regular file", path);
        die("config file '%s' is %lld bytes, too large for a preset (at most %zu)", path, (long long)st.st_size, max);
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    int bad = !text || ferror(f);
    fclose(f);
    if (bad) { free(text); die("cannot read config file '%s'", path); }
    die_set_cleanup(free, text);
    config_load_text(c, text, n, path);
    die_set_cleanup(NULL, NULL);
    free(text);
}

static int divides(int a, int b) { return a > 0 && b % a == 0; }

// The dtypes, the positive sizes and what the model and run shape need.
static void validate_model(const Config *c) {
    if (c->n_routing_groups == 0 || c->n_routing_groups < -1)
        die("n_routing_groups must be -1 (groups off) or positive, got %d", c->n_routing_groups);
    if (c->weight_dtype != DTYPE_FLOAT32 || c->grad_dtype != DTYPE_FLOAT32)
        die("weight_dtype and grad_dtype must be float32 (master weights, gradients and optimizer state "
            "stay float32 in every mode), got '%s' and '%s'", dtype_name(c->weight_dtype), dtype_name(c->grad_dtype));
    if (c->mu_dtype == MU_DTYPE_BFLOAT16 && c->opt_type == OPT_ADAM_PAX)
        die("mu_dtype=bfloat16 with opt_type=adam_pax: MaxText's adam_pax keeps both moments as the weights' dtype "
            "(float32); use mu_dtype=\"\" or opt_type=adamw");
    if (c->mu_dtype == MU_DTYPE_BFLOAT16 && c->opt_type != OPT_ADAMW && c->opt_type != OPT_MUON &&
        c->opt_type != OPT_ADAM_PAX)
        die("mu_dtype=bfloat16 is the dtype of AdamW's first moment: opt_type=%s keeps none (use opt_type=adamw, "
            "or mu_dtype=\"\")", opt_type_name(c->opt_type));
    if (!c->scan_layers && c->ici_pipeline_parallelism > 1)
        die("scan_layers=false is not supported with a pipeline (ici_pipeline_parallelism=%d): the pipeline "
            "runs its stage's layers in its own loop; use scan_layers=true or ici_pipeline_parallelism=1",
            c->ici_pipeline_parallelism);
    if (!c->cast_logits_to_fp32)
        die("cast_logits_to_fp32=false is not supported: the loss is computed in float32 from the logits");
    if (c->dry_run_all_devices && !c->dry_run)
        die("dry_run_all_devices=true chooses how a dry run plans its devices: it needs dry_run=true "
            "(without it this would be a training run)");
    struct { const char *name; int v; } pos[] = {
        {"base_emb_dim", c->base_emb_dim}, {"base_num_query_heads", c->base_num_query_heads},
        {"base_num_decoder_layers", c->base_num_decoder_layers}, {"vocab_size", c->vocab_size},
        {"max_target_length", c->max_target_length}, {"per_device_batch_size", c->per_device_batch_size},
        {"gradient_accumulation_steps", c->gradient_accumulation_steps}, {"steps", c->steps},
        {"num_experts", c->num_experts}, {"num_experts_per_tok", c->num_experts_per_tok},
        {"eval_steps", c->eval_steps}, {"log_period", c->log_period}, {"parity_steps", c->parity_steps},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) die("%s must be positive, got %d", pos[i].name, pos[i].v);
}

// GQA or MLA: head counts and widths RoPE can rotate.
static void validate_attention(const Config *c) {
    if (cfg_is_mla(c)) {
        if (c->kv_lora_rank <= 0 || c->qk_nope_head_dim <= 0 || c->v_head_dim <= 0)
            die("attention_type=mla needs kv_lora_rank, qk_nope_head_dim and v_head_dim > 0 "
                "(got %d, %d, %d)", c->kv_lora_rank, c->qk_nope_head_dim, c->v_head_dim);
        if (c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2)
            die("qk_rope_head_dim must be positive and even (RoPE rotates pairs), got %d", c->qk_rope_head_dim);
        if (c->q_lora_rank < 0) die("q_lora_rank must be >= 0, got %d", c->q_lora_rank);
    } else {
        if (c->base_num_kv_heads <= 0 || c->head_dim <= 0)
            die("base_num_kv_heads and head_dim must be positive (got %d, %d)", c->base_num_kv_heads, c->head_dim);
        if (!divides(c->base_num_kv_heads, c->base_num_query_heads))
            die("base_num_kv_heads (%d) must divide base_num_query_heads (%d)",
                c->base_num_kv_heads, c->base_num_query_heads);
        if (c->head_dim % 2) die("head_dim must be even (RoPE rotates pairs), got %d", c->head_dim);
    }
    // yarn's table has a row per position up to max_position_embeddings (MaxText looks the
    // positions up in it; a later position would read the last row).
    if (c->rope_type == ROPE_YARN && c->max_target_length > c->max_position_embeddings)
        die("rope_type=yarn: max_target_length %d is past max_position_embeddings %d (yarn's table has a row per "
            "position); raise max_position_embeddings", c->max_target_length, c->max_position_embeddings);
}

// The experts, the routing groups and the dense layers.
static void validate_moe(const Config *c) {
    if (c->num_experts_per_tok > c->num_experts)
        die("num_experts_per_tok (%d) cannot exceed num_experts (%d)", c->num_experts_per_tok, c->num_experts);
    if (cfg_expert_dim(c) <= 0) die("expert width must be positive (base_mlp_dim / base_moe_mlp_dim)");
    if (c->first_num_dense_layers < 0 || c->first_num_dense_layers > c->base_num_decoder_layers)
        die("first_num_dense_layers (%d) must be between 0 and base_num_decoder_layers (%d)",
            c->first_num_dense_layers, c->base_num_decoder_layers);
    if (c->first_num_dense_layers > 0 && c->base_mlp_dim <= 0)
        die("dense layers need base_mlp_dim > 0, got %d", c->base_mlp_dim);
    if (c->n_routing_groups > 0) {
        if (!cfg_sigmoid_router(c) && !cfg_softmax_router(c))
            die("n_routing_groups needs routed_score_func=sigmoid (DeepSeek-V3's groups) or softmax (DeepSeek-V2's)");
        if (c->num_experts % c->n_routing_groups)
            die("n_routing_groups (%d) must divide num_experts (%d)", c->n_routing_groups, c->num_experts);
        if (cfg_sigmoid_router(c) && c->num_experts / c->n_routing_groups < 2)
            die("each routing group needs at least 2 experts (group score = sum of its top 2); "
                "num_experts %d / n_routing_groups %d < 2", c->num_experts, c->n_routing_groups);
        if (c->topk_routing_group <= 0 || c->topk_routing_group > c->n_routing_groups)
            die("topk_routing_group (%d) must be between 1 and n_routing_groups (%d)",
                c->topk_routing_group, c->n_routing_groups);
        if (c->topk_routing_group * (c->num_experts / c->n_routing_groups) < c->num_experts_per_tok)
            die("topk_routing_group %d groups of %d experts hold fewer than num_experts_per_tok (%d) experts",
                c->topk_routing_group, c->num_experts / c->n_routing_groups, c->num_experts_per_tok);
    }
    if (c->routed_bias && !cfg_sigmoid_router(c))
        die("routed_bias needs routed_score_func=sigmoid (DeepSeek routing)");
    if (c->shared_experts < 0) die("shared_experts must be >= 0, got %d", c->shared_experts);
    if (c->capacity_factor > 0 && c->sparse_matmul)
        die("capacity_factor=%g drops tokens only on the dense path: set sparse_matmul=false "
            "(the sparse path is dropless)", c->capacity_factor);
}

// The canonical sums over tokens: chunks and leaves that cut every sequence evenly.
static void validate_sums(const Config *c) {
    int chunks = cfg_context_chunks(c);
    if (chunks < 1 || (chunks & (chunks - 1)))
        die("context_reduce_chunks must be a power of two (the chunks of a sequence form a pairwise tree), got %d",
            chunks);
    if (!divides(chunks, c->max_target_length))
        die("context_reduce_chunks (%d) must divide max_target_length (%d): every sequence is cut into that many "
            "equal chunks", chunks, c->max_target_length);
    int leaf = cfg_leaf_tokens(c);
    if (!divides(leaf, cfg_chunk_tokens(c)))
        die("reduce_leaf_tokens (%d) must divide the chunk length, max_target_length / context_reduce_chunks = "
            "%d / %d = %d: a leaf never spans two chunks", leaf, c->max_target_length, chunks, cfg_chunk_tokens(c));
}

// The decimal a float key was written as (the shortest that reads back as the float kept),
// as a double: what MaxText's Python computes with. A count truncated from a product needs
// it: 0.21 x 300 is 63.0 in double, where the float's product is 62.99999.
double cfg_decimal(float value) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {   // 9 digits give back any float
        snprintf(text, sizeof text, "%.*g", digits, (double)value);
        if (strtof(text, NULL) == value) break;
    }
    return strtod(text, NULL);
}

int cfg_steps_fraction(float fraction, int n) { return (int)(cfg_decimal(fraction) * n); }

// Evaluation, the schedule, vocabulary tiling and the attention kernels.
static void validate_training(const Config *c) {
    if (c->eval_fraction <= 0 || c->eval_fraction >= 1)
        die("eval_fraction must be between 0 and 1, got %g", c->eval_fraction);
    if (c->eval_per_device_batch_size < 0)
        die("eval_per_device_batch_size must be >= 0 (0 = per_device_batch_size), got %d", c->eval_per_device_batch_size);
    if (c->learning_rate < 0) die("learning_rate must be >= 0, got %g", c->learning_rate);
    if (c->checkpoint_period > 0 && !c->save_checkpoint[0])
        die("checkpoint_period=%d saves every %d steps to save_checkpoint, which is not set: give "
            "save_checkpoint=PATH, or leave checkpoint_period at 0", c->checkpoint_period, c->checkpoint_period);
    // Both fractions are in range before they become step counts below (int of a product).
    if (!(c->warmup_steps_fraction >= 0 && c->warmup_steps_fraction <= 1))
        die("warmup_steps_fraction must be in [0,1], got %g", c->warmup_steps_fraction);
    if (!(c->wsd_decay_steps_fraction >= 0 && c->wsd_decay_steps_fraction <= 1))
        die("wsd_decay_steps_fraction must be in [0,1], got %g", c->wsd_decay_steps_fraction);
    int len = cfg_lr_schedule_length(c), warm = cfg_lr_warmup_steps(c), decay = cfg_lr_wsd_decay_steps(c);
    if (c->lr_schedule_type == LR_SCHEDULE_WSD && warm + decay > len)
        die("lr_schedule_type=wsd: warmup_steps_fraction (%g: %d steps) and wsd_decay_steps_fraction (%g: %d steps) "
            "leave no room in the schedule's %d steps: their sum must be at most 1", c->warmup_steps_fraction, warm,
            c->wsd_decay_steps_fraction, decay, len);
    if (c->num_vocab_tiling < 1)
        die("num_vocab_tiling must be >= 1 (1 = the whole logits at once), got %d", c->num_vocab_tiling);
    // attention kernels and context parallelism
    if (c->attn_block_q < 1 || c->attn_block_kv < 1)
        die("attn_block_q and attn_block_kv must be >= 1, got %d and %d", c->attn_block_q, c->attn_block_kv);
}

// The sample's choice of tokens: each of its keys only with the strategy that reads it.
static void validate_sample(const Config *c) {
    int strategy = c->decode_sampling_strategy;
    if (strategy == SAMPLING_TOPK && (c->decode_sampling_top_k < 1 || c->decode_sampling_top_k > c->vocab_size))
        die("decode_sampling_strategy=topk draws among the decode_sampling_top_k largest logits: it must be in [1, "
            "vocab_size = %d], got %d", c->vocab_size, c->decode_sampling_top_k);
    if (strategy != SAMPLING_TOPK && c->decode_sampling_top_k != 0)
        die("decode_sampling_top_k=%d is read only by decode_sampling_strategy=topk, and the strategy is %s: set "
            "decode_sampling_strategy=topk, or leave decode_sampling_top_k at 0", c->decode_sampling_top_k,
            decode_sampling_strategy_name(c->decode_sampling_strategy));
    if (strategy == SAMPLING_NUCLEUS && !(c->decode_sampling_nucleus_p > 0))
        die("decode_sampling_strategy=nucleus draws among the largest logits that hold decode_sampling_nucleus_p of "
            "the probability: it must be in (0, 1], got %g", c->decode_sampling_nucleus_p);
    if (strategy != SAMPLING_NUCLEUS && c->decode_sampling_nucleus_p != -1.0f)
        die("decode_sampling_nucleus_p=%g is read only by decode_sampling_strategy=nucleus, and the strategy is %s: "
            "set decode_sampling_strategy=nucleus, or leave decode_sampling_nucleus_p at -1",
            c->decode_sampling_nucleus_p, decode_sampling_strategy_name(c->decode_sampling_strategy));
    if (c->prompt[0] && c->sample_length == 0)
        die("prompt is the sample's, and sample_length=0 prints none: give sample_length > 0, or leave prompt empty");
}

void config_validate(const Config *c) {
    validate_model(c);   // the checks in this order: the first failing one names its key
    validate_attention(c);
    validate_moe(c);
    validate_sums(c);
    validate_training(c);
    validate_sample(c);
    config_check_ranges(c);   // every numeric key inside its range (base/config_ranges.c)
    config_check_sizes(c);
}

// What a key's value may be: its range, or its enum's names; "" for strings and booleans.
static void values_text(const KeyDef *k, char *buf, size_t cap) {
    char text[512];
    buf[0] = '\0';
    if (k->type == K_ENUM) {
        size_t n = (size_t)snprintf(buf, cap, "values:");
        for (int i = 0; i < k->nnames && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s %s", i ? "," : "", k->names[i][0] ? k->names[i] : "\"\"");
    } else if (config_range_text(k->name, text, sizeof text)) {
        snprintf(buf, cap, "range: %s", text);
    } else if (k->type == K_INT || k->type == K_FLOAT || k->type == K_BYTES) {
        snprintf(buf, cap, "range: none declared");
    }
}

// s with the characters that markdown would read ('|' ends a cell, '*' emphasises) escaped.
static void print_markdown_text(const char *s) {
    for (; *s; s++) {
        if (*s == '|' || *s == '*') putchar('\\');
        putchar(*s);
    }
}

void config_print_help(int markdown) {
    static const char *const type_names[] = {"int", "float", "bool", "string", "bytes", "name"};
    char values[640];
    if (markdown) printf("| key | type | default | meaning | values |\n|---|---|---|---|---|\n");
    else printf("%-36s %-10s %s\n", "key", "default", "meaning");
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        const char *dflt = k->dflt[0] ? k->dflt : "\"\"";
        values_text(k, values, sizeof values);
        for (size_t j = 0; j < sizeof RENAMES / sizeof RENAMES[0]; j++)   // an earlier name is read too
            if (!strcmp(RENAMES[j].name, k->name)) {
                size_t n = strlen(values);
                snprintf(values + n, sizeof values - n, "%searlier name %s, also read", n ? "; " : "", RENAMES[j].old);
            }
        if (markdown) {
            printf("| `%s` | %s | `%s` | ", k->name, type_names[k->type], dflt);
            print_markdown_text(k->help);
            printf(" | ");
            print_markdown_text(values);
            printf(" |\n");
        } else {
            printf("%-36s %-10s %s", k->name, dflt, k->help);
            if (values[0]) printf(" [%s]", values);
            printf("\n");
        }
    }
}

// The files the run reads and writes, checked before anything is computed (base/paths.h).
void config_check_paths(const Config *c) {
    if (strcmp(c->dataset_path, "synthetic")) check_input_file("dataset_path", c->dataset_path);
    if (c->load_checkpoint[0]) check_input_file("load_checkpoint", c->load_checkpoint);
    if (c->load_parameters_path[0]) check_input_file("load_parameters_path", c->load_parameters_path);
    if (c->save_checkpoint[0]) check_output_path("save_checkpoint", c->save_checkpoint);
    if (c->metrics_file[0]) check_output_path("metrics_file", c->metrics_file);
    if (c->memory_trace[0]) check_output_path("memory_trace", c->memory_trace);
    if (c->dump_parity[0]) check_output_dir("dump_parity", c->dump_parity);
}

// Append to buf with bounds checking.
static void jcat(char *buf, int cap, int *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#include <stdarg.h>
static void jcat(char *buf, int cap, int *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, (size_t)(cap - *len), fmt, ap);
    va_end(ap);
    if (n < 0 || *len + n >= cap) die("internal: config JSON buffer too small (%d bytes)", cap);
    *len += n;
}

int config_to_json(const Config *c, char *buf, int cap) {
    int len = 0;
    jcat(buf, cap, &len, "{");
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        const void *field = (const char *)c + k->offset;
        jcat(buf, cap, &len, "%s\"%s\": ", i ? ", " : "", k->name);
        switch (k->type) {
        case K_INT: jcat(buf, cap, &len, "%d", *(const int *)field); break;
        case K_FLOAT:   // JSON has no inf or nan; set_value never lets one in
            if (!isfinite(*(const float *)field)) die("internal: config key '%s' is not finite", k->name);
            jcat(buf, cap, &len, "%.9g", (double)*(const float *)field);
            break;
        case K_BYTES: jcat(buf, cap, &len, "%lld", (long long)*(const int64_t *)field); break;
        case K_BOOL: jcat(buf, cap, &len, "%s", *(const int *)field ? "true" : "false"); break;
        case K_STR:
        case K_ENUM: {   // an enum as its name
            const char *text = k->type == K_ENUM ? k->names[*(const int *)field] : (const char *)field;
            jcat(buf, cap, &len, "\"");
            for (const char *p = text; *p; p++) {
                if (*p == '"' || *p == '\\') jcat(buf, cap, &len, "\\%c", *p);
                else if ((unsigned char)*p < 0x20) jcat(buf, cap, &len, "\\u%04x", *p);
                else jcat(buf, cap, &len, "%c", *p);
            }
            jcat(buf, cap, &len, "\"");
            break;
        }
        }
    }
    jcat(buf, cap, &len, "}");
    return len;
}

// config_to_json writes every key once: one missing (an edited file; another version's) would
// silently take its default, and one given twice would be read either way.
static void json_keys_check(const char *seen, const char *where) {
    for (int i = 0; i < NKEYS; i++)
        if (!seen[i] && !since_format_1(KEYS[i].name))
            die("%s: config metadata has no key '%s' (written by another version of meshmoe, or edited?)", where,
                KEYS[i].name);
}

// Reads the flat object written by config_to_json: "key": value pairs, values are numbers,
// true/false or strings with \" \\ \uXXXX escapes; every key once.
void config_from_json(Config *c, const char *json, const char *where) {
    const char *p = json;
    char key[128], val[CFG_STR + 8], seen[NKEYS] = {0};
    while (*p && *p != '{') p++;
    if (*p != '{') die("%s: config metadata is not a JSON object", where);
    p++;
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (*p == '}') { json_keys_check(seen, where); return; }
        if (*p != '"') die("%s: malformed config metadata near '%.20s'", where, p);
        int n = 0;
        for (p++; *p && *p != '"'; p++) if (n < 127) key[n++] = *p;
        key[n] = '\0';
        if (*p != '"') die("%s: malformed config metadata", where);
        p++;
        while (isspace((unsigned char)*p) || *p == ':') p++;
        n = 0;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                char ch = *p;
                if (ch == '\\') {
                    p++;
                    if (*p == 'u') {   // \uXXXX: four hex digits, all before the end of the text
                        for (int d = 1; d <= 4; d++)
                            if (!isxdigit((unsigned char)p[d])) die("%s: malformed \\u escape in config metadata", where);
                        ch = (char)strtol((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
                        p += 4;
                    } else if (*p == '\0') {
                        break;   // a '\\' ending the text: reported as unterminated below
                    } else {
                        ch = *p;
                    }
                }
                if (n < CFG_STR) val[n++] = ch;
            }
            if (*p != '"') die("%s: malformed config metadata", where);
            p++;
        } else {
            while (*p && *p != ',' && *p != '}' && !isspace((unsigned char)*p)) if (n < CFG_STR) val[n++] = *p++; else p++;
        }
        val[n] = '\0';
        const KeyDef *k = find_key(key);
        if (!k) die("%s: config metadata has unknown key '%s' (written by another version of meshmoe?)", where, key);
        if (seen[k - KEYS]++) die("%s: config metadata gives key '%s' twice", where, k->name);
        set_value(c, k, val, where);
    }
}
