"""tests/hf/defaults.py: trainer/hf_defaults.c's table of config-class defaults, against the
classes of the transformers installed (MixtralConfig, DeepseekV3Config, DeepseekV2Config).

    defaults.py trainer/hf_defaults.c

The table is what load_hf and hf-preset take for a key that config.json leaves out; a wrong
cell would read a published file as another model. Each cell that names a value is compared
with the attribute of a default-constructed class (its value as JSON: None is null); a cell
without one (the class has no default there) is compared only where the class has the plain
attribute, which must then be None. Also the base wavelength each class's RoPE takes when
the file gives none (the table's rope() in the same file). Prints one line per check and
`N passed, N failed`.
"""
import json
import re
import sys

from transformers import DeepseekV2Config, DeepseekV3Config, MixtralConfig

CLASSES = (MixtralConfig, DeepseekV3Config, DeepseekV2Config)   # the table's columns, in order
THETA = {MixtralConfig: "1000000.0", DeepseekV3Config: "10000.0", DeepseekV2Config: "10000.0"}


def table(source):
    body = source[source.index("static const Default DEFAULTS[] = {"):]
    body = body[:body.index("};")]
    cell = r'\s*(NULL|"(?:[^"\\]|\\.)*")'
    rows = re.findall(r'\{"([a-z_]+)",' + cell + "," + cell + "," + cell + r"\}", body)
    if not rows:
        sys.exit("defaults.py: no rows found in the table")
    return [(key, [None if c == "NULL" else json.loads(c) for c in cells]) for key, *cells in rows]


def main():
    source = open(sys.argv[1]).read()
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("  ok   " if ok else "  FAIL ") + what)
        passed, failed = passed + ok, failed + (not ok)

    made = {cls: cls() for cls in CLASSES}
    rows = table(source)
    for key, cells in rows:
        for cls, text in zip(CLASSES, cells):
            cfg = made[cls]
            plain = key in cls.__dataclass_fields__ if hasattr(cls, "__dataclass_fields__") else hasattr(cfg, key)
            if text is None:
                if plain and key not in ("num_key_value_heads",):   # (that one: made from the heads)
                    got = getattr(cfg, key)
                    check(got is None, f"{cls.__name__}.{key}: no default in the table, {got!r} in the class")
                continue
            want = json.loads(text)
            got = getattr(cfg, key, "(no such attribute)")
            same = got is want if isinstance(want, bool) or isinstance(got, bool) else got == want
            check(same, f"{cls.__name__}.{key}: {text} in the table, {got!r} in the class")
    for cls in CLASSES:
        theta = made[cls].rope_parameters["rope_theta"]
        check(float(THETA[cls]) == theta and THETA[cls] in source,
              f"{cls.__name__}: RoPE's base wavelength {THETA[cls]} by default, {theta!r} in the class")
    print(f"{len(rows)} keys, {len(CLASSES)} classes")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
