"""Pools the latency of several dsvisor-bench-load --json reports, as if one run had
recorded them all: the histograms' buckets (latency_buckets_ns: [lo, width, count]) add
up, and a quantile is answered as the tool's own (hist.h): the midpoint of the bucket
holding the sample of rank ceil(q * count), kept within the exact min and max.

    import pool
    p99 = pool.quantile([json.load(open(f)) for f in files], 0.99)   # seconds, or None
"""
import math


def quantile(reports, q):
    buckets, count = {}, 0
    lo_s, hi_s = math.inf, -math.inf
    for j in reports:
        for lo, width, n in j.get('latency_buckets_ns', []):
            buckets[(lo, width)] = buckets.get((lo, width), 0) + n
            count += n
        if j.get('min_s') is not None:
            lo_s = min(lo_s, j['min_s'])
        if j.get('max_s') is not None:
            hi_s = max(hi_s, j['max_s'])
    if count == 0:
        return None
    rank = max(1, math.ceil(q * count))
    seen = 0
    for lo, width in sorted(buckets):
        seen += buckets[(lo, width)]
        if seen >= rank:
            mid = (lo + width // 2) / 1e9
            return min(max(mid, lo_s), hi_s)
    return hi_s
