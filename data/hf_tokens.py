#!/usr/bin/env python3
"""data/hf_tokens.py: text as a Hugging Face model's tokens, in the llm.c token file that
`dataset_path` reads (data/tokens.h), and such tokens back as text.

    python3 data/hf_tokens.py encode HF_DIR IN.txt OUT.bin
    python3 data/hf_tokens.py decode HF_DIR "[1][415] |[2936]..."  (what sample_length prints)
    python3 data/hf_tokens.py ids HF_DIR TEXT   (TEXT's ids as the prompt key reads them: [1][415])

HF_DIR holds the model's tokenizer.json (Mixtral-8x7B and DeepSeek-V3 publish one) and its
config.json. `encode` reads IN.txt as one document (UTF-8), encodes it with the tokenizer's
own special tokens (a beginning-of-text token where its post-processor adds one), checks every
token against config.json's vocab_size, and writes OUT.bin: GPT-2's layout (uint16 tokens)
when every token is below 65536, else LLaMA-3's (uint32; DeepSeek-V3's 129280 ids need it).
OUT.bin is written beside itself under a temporary name and renamed when complete, and is
refused when it is IN.txt or the tokenizer. Needs the `tokenizers` package (pip install
tokenizers; transformers installs it too). Then:

    ./train hf-preset HF_DIR > my.yml
    ./train my.yml load_hf=HF_DIR dataset_path=OUT.bin ...
"""
import json
import os
import struct
import sys
import tempfile

HEADER_INTS = 256
FORMATS = {2: (20240520, 1, "H"), 4: (20240801, 7, "I")}   # bytes a token: magic, version, struct code


def die(msg):
    sys.exit(f"meshmoe: hf_tokens: {msg}")


def tokenizer(folder):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("the `tokenizers` package is not installed (pip install tokenizers)")
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        die(f"{path}: no such file (the model's tokenizer, as Hugging Face publishes it)")
    try:
        return Tokenizer.from_file(path), path
    except Exception as e:   # the library's own reason, named with the file
        die(f"{path}: {e}")


def vocab_size(folder):
    path = os.path.join(folder, "config.json")
    try:
        with open(path) as f:
            v = json.load(f).get("vocab_size")
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    if not isinstance(v, int) or v <= 0:
        die(f"{path}: no positive integer vocab_size")
    return v


def write_tokens(path, ids):
    width = 4 if max(ids) > 0xFFFF else 2
    magic, version, code = FORMATS[width]
    header = struct.pack(f"<{HEADER_INTS}i", magic, version, len(ids), *[0] * (HEADER_INTS - 3))
    fd, tmp = tempfile.mkstemp(prefix=".hf_tokens.", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(struct.pack(f"<{len(ids)}{code}", *ids))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return width


def same_file(a, b):
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def encode(folder, src, dst):
    tok, tok_path = tokenizer(folder)
    vocab = vocab_size(folder)
    for other, what in ((src, "the text"), (tok_path, "the tokenizer"), (os.path.join(folder, "config.json"), "config.json")):
        if same_file(dst, other):
            die(f"{dst} is {what} ({other}): the output would overwrite an input")
    try:
        with open(src, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        die(f"{src}: {e}")
    if not text:
        die(f"{src} is empty")
    ids = tok.encode(text).ids
    if not ids or len(ids) >= 2 ** 31:
        die(f"{src} makes {len(ids)} tokens: a token file holds 1 to 2^31 - 1")
    high = max(ids)
    if high >= vocab:
        die(f"token {high} at {ids.index(high)} is outside config.json's vocab_size {vocab}: "
            f"the tokenizer is not this model's")
    try:
        width = write_tokens(dst, ids)
    except OSError as e:
        die(f"cannot write {dst}: {e.strerror}")
    print(f"wrote {len(ids)} tokens of {src} ({len(text)} characters) to {dst}, "
          f"{width * 8}-bit, the largest {high} of vocab_size {vocab}")


def decode(folder, printed):
    """printed: ids as sample_length prints them, "[1][415] |[2936]" (the prompt, then what
    the model generated); each part decoded, joined by " | "."""
    tok, _ = tokenizer(folder)
    parts = []
    for part in printed.split("|"):
        body = part.strip()
        if not body:
            continue
        if not (body.startswith("[") and body.endswith("]")):
            die(f'not ids as sample_length prints them ("[1][415] |[2936]"): {body[:60]}')
        try:
            ids = [int(x) for x in body[1:-1].split("][")]
        except ValueError:
            die(f'not ids as sample_length prints them ("[1][415] |[2936]"): {body[:60]}')
        parts.append(tok.decode(ids, skip_special_tokens=False))
    print(" | ".join(parts))


def ids(folder, text):
    """text as the tokenizer's ids (with its special tokens, as `encode`), written as the prompt
    key reads them and the sample prints them: "[1][415][2936]"."""
    tok, _ = tokenizer(folder)
    vocab = vocab_size(folder)
    got = tok.encode(text).ids
    if not got:
        die(f"{text[:40]!r} makes no tokens")
    if max(got) >= vocab:
        die(f"token {max(got)} is outside config.json's vocab_size {vocab}: the tokenizer is not this model's")
    print("".join(f"[{i}]" for i in got))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "decode":
        decode(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "ids":
        ids(*sys.argv[2:])
    else:
        sys.exit(__doc__)
