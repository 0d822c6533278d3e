"""Decodes a PNG (8-bit RGB/RGBA, non-interlaced) with the standard library
and prints its size and how many pixels have each of the given colours
(#rrggbb, within a tolerance per channel): enough to check that a rendered
picture has content, not just a blank page."""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("not a PNG: " + path)
    at, idat = 8, b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(
                ">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    if depth != 8 or ctype not in (2, 6) or interlace:
        sys.exit("unsupported PNG format")
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def main():
    width, height, bpp, rows = read_png(sys.argv[1])
    print("png %dx%d" % (width, height))
    for colour in sys.argv[2:]:
        want = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
        n = 0
        for line in rows:
            for x in range(0, len(line), bpp):
                if all(abs(line[x + i] - want[i]) <= 24 for i in range(3)):
                    n += 1
        print("%s %s" % (colour, "some" if n >= 20 else "none"))


main()
