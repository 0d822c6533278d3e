"""Compares the expert rows per EP rank that two runs' --report traffic
measured: `contiguous.txt placed.txt LAYER` prints whether the placed run's
max/mean of that layer is below the contiguous one's, else fails."""
import re
import sys


def imbalance(path, layer):
    text = open(path).read()
    section = text.split("expert rows per rank in prefill", 1)[1]
    m = re.search(r"layer %d: max \d+, mean [\d.]+ over \d+ ranks, "
                  r"max/mean ([\d.]+)" % layer, section)
    if not m:
        sys.exit("%s: no expert rows of layer %d" % (path, layer))
    return float(m.group(1))


contiguous, placed, layer = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = imbalance(contiguous, layer), imbalance(placed, layer)
if not b < a:
    sys.exit("layer %d: placed max/mean %.3f is not below %.3f" % (layer, b, a))
print("layer %d: placed max/mean below the contiguous one" % layer)
