// trainer/hf_json.h: a small reader for Hugging Face's JSON files (trainer/hf_json.c).
#ifndef MESHMOE_HF_JSON_H
#define MESHMOE_HF_JSON_H
#include <stddef.h>

// The whole file at path, NUL-terminated (malloc'd); dies "WHO: ..." when it cannot be read.
char *json_read_text(const char *path, const char *who);
// The next member of an object: *p inside the object (after '{' or a member); sets the key's
// text (k0, klen) and the value's [v0, v1). 0 at the end.
int json_next_member(const char **p, const char **k0, int *klen, const char **v0, const char **v1);
// Where the value of member `key` of the object at obj lies, [*v0, *v1); 0 if absent.
int json_member_at(const char *obj, const char *key, const char **v0, const char **v1);
// The value of member `key` of the object at obj, copied into out (raw text); 0 if absent.
int json_member(const char *obj, const char *key, char *out, size_t cap);
// The first top-level member of the object at obj that is named again later: 1 with its key's
// text (key, klen), 0 when each is named once. JSON readers differ on a repeated one (Python's
// takes the last, json_member the first), so the readers here refuse them.
int json_repeated_member(const char *obj, const char **key, int *klen);
// The same, dying "WHO: PATH gives "KEY" twice" for a repeated member.
void json_members_unique(const char *obj, const char *path, const char *who);
// Whether the raw JSON values a (wanted) and b (found) mean the same: numbers as floats,
// objects member by member of a, the rest as text without blanks.
int json_same(const char *a, const char *b);

// The value transformers' config class reads for `key` from config.json's text (raw JSON, into
// out): the file's, else the class's default for its model_type, null heads made from the
// others, RoPE's parameters gathered from a file of any age (trainer/hf_defaults.c). 0 when
// the file leaves it out and the class has no default.
int hf_config_value(const char *text, const char *key, char *out, size_t cap);
// The config class config.json's model_type names: mixtral, deepseek_v3, deepseek_v2, or another.
enum { HF_MIXTRAL, HF_DEEPSEEK_V3, HF_DEEPSEEK_V2, HF_OTHER };
int hf_model_class(const char *text);
#endif
