#!/usr/bin/env python3
"""Independent oracle for model/train/portable_random.h (issue 18, defect 4):
mt19937_64 written from Matsumoto & Nishimura's reference parameters (not
from the C++ standard library), rejection-sampled indices and Fisher-Yates
from the back. It checks itself against the standard's mandated 10000th
output, then asserts the permutations that portable_random_test.cc
hard-codes, so the C++ values are tied to this independent computation.
usage: portable_shuffle_oracle.py"""
class MT64:
    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & 0xFFFFFFFFFFFFFFFF
        for i in range(1, 312):
            self.mt[i] = (6364136223846793005 * (self.mt[i - 1] ^ (self.mt[i - 1] >> 62)) + i) & 0xFFFFFFFFFFFFFFFF
        self.i = 312
    def next(self):
        if self.i >= 312:
            for k in range(312):
                x = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % 312] & 0x7FFFFFFF)
                xa = x >> 1
                if x & 1: xa ^= 0xB5026F5AA96619E9
                self.mt[k] = self.mt[(k + 156) % 312] ^ xa
            self.i = 0
        y = self.mt[self.i]; self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & 0xFFFFFFFFFFFFFFFF
def uniform_int(r, n):
    t = (2**64 - n) % n
    while True:
        x = r.next()
        if x >= t: return x % n
def shuffle(v, r):
    for i in range(len(v), 1, -1):
        j = uniform_int(r, i); v[i-1], v[j] = v[j], v[i-1]
    return v
EXPECTED = {
    (3, 10): [1, 6, 0, 4, 8, 5, 2, 3, 9, 7],
    (42, 30): [5, 4, 22, 7, 17, 27, 8, 11, 25, 21, 14, 1, 9, 20, 2, 13, 29, 0, 23, 15, 10, 12, 18, 16, 3, 19, 24, 28,
               26, 6],
}
SECOND_EPOCH = [6, 2, 5, 3, 0, 4, 7, 8, 11, 9, 10, 1]  # seed 7: after shuffling 5 items, 12 items

r = MT64(5489)
for _ in range(9999):
    r.next()
assert r.next() == 9981545732273789042, "mt19937_64 does not match the standard's 10000th output"
for (seed, n), want in EXPECTED.items():
    got = shuffle(list(range(n)), MT64(seed))
    assert got == want, (seed, n, got)
r = MT64(7)
shuffle(list(range(5)), r)
assert shuffle(list(range(12)), r) == SECOND_EPOCH
print("portable shuffle oracle: %d permutations match" % (len(EXPECTED) + 1))
