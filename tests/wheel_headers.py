"""tests/wheel_headers.py WHEEL_DIR DEST: the include/ folder of the one wheel in WHEEL_DIR,
unpacked into DEST/include (the Makefile's cuDNN frontend headers; a wheel is a zip file)."""
import glob
import sys
import zipfile

wheels = glob.glob(sys.argv[1] + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"wheel_headers.py: {len(wheels)} wheels in {sys.argv[1]}, one expected")
with zipfile.ZipFile(wheels[0]) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not names:
        sys.exit(f"wheel_headers.py: {wheels[0]} has no include/ folder")
    for n in names:
        z.extract(n, sys.argv[2])
