#!/usr/bin/env python3
"""tests/fatbin.py OBJECT: what device code an nvcc object or binary holds, one line an entry:
"elf sm_90 compressed", "ptx sm_90 plain", ... (tests/gpu_build.sh reads it).

The code sits in the ELF section .nv_fatbin (objcopy copies it out): fat binaries one after
another, each a 16-byte header (magic 0xBA55ED50, version, header size, the entries' bytes),
then its entries, each a header and its payload. An entry's header starts with its kind
(1 PTX, 2 machine code) and sizes; its target architecture (80 for sm_80) is the 32-bit word
at byte 28, and bit 0x8000 of the 64-bit flags at byte 40 marks a compressed payload (nvcc's
--compress-mode). Read from the headers alone, which compression leaves as they are; no CUDA
tool is needed (cuobjdump is not part of every toolkit's install)."""
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "elf"}
COMPRESSED = 0x8000


def entries(blob):
    at = 0
    while at + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != MAGIC:
            raise ValueError(f"no fat binary at byte {at} (magic {magic:#x})")
        p, end = at + header, at + header + size
        while p < end:
            kind, _, eheader, payload = struct.unpack_from("<HHIQ", blob, p)
            arch, = struct.unpack_from("<I", blob, p + 28)
            flags, = struct.unpack_from("<Q", blob, p + 40)
            yield KINDS.get(kind, f"kind{kind}"), arch, bool(flags & COMPRESSED)
            p += eheader + payload
        at = end


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tests/fatbin.py OBJECT")
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", sys.argv[1], out.name], check=True)
        blob = open(out.name, "rb").read()
    if not blob:
        sys.exit(f"tests/fatbin.py: {sys.argv[1]} has no .nv_fatbin section")
    for kind, arch, packed in entries(blob):
        print(f"{kind} sm_{arch} {'compressed' if packed else 'plain'}")


if __name__ == "__main__":
    main()
