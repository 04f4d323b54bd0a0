#!/usr/bin/env python3
"""Float64 reference for the Hard Concrete head gates (engine/analysis/gates.c).

Written from the formulas of issue 12 / docs/plans.md ("Gate training"),
Louizos et al. 2018 and Voita et al. 2019, independently of the C code:

  u ~ U(0, 1), s = sigmoid((ln u - ln(1 - u) + log_alpha) / beta),
  z = min(1, max(0, s (zeta - gamma) + gamma)),  gamma = -0.1, zeta = 1.1
  test-time z = min(1, max(0, sigmoid(log_alpha) (zeta - gamma) + gamma))
  L0 share P(z != 0) = sigmoid(log_alpha - beta ln(-gamma / zeta))

and their derivatives in log_alpha; Adam (Kingma and Ba, bias-corrected,
b1 0.9, b2 0.999, eps 1e-8) on a given gradient sequence; and the noise
generator the C code documents (splitmix64 seeding xoshiro256** from the
seed, the FNV-1a hash of the study's name and lambda's IEEE bits; uniforms
((r >> 11) + 0.5) / 2^53).

Derivatives are analytic here and checked against central finite
differences in float64 before anything is written.

    /work/venv/bin/python tools/gen_gate_fixtures.py   # -> tests/fixtures/gates.json
"""
import json
import math
import os
import struct

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "gates.json")
GAMMA, ZETA = -0.1, 1.1
M64 = (1 << 64) - 1


def sigmoid(x):
    x = np.float64(x)
    return 1.0 / (1.0 + np.exp(-x)) if x >= 0 else np.exp(x) / (1.0 + np.exp(x))


def sample(la, u, beta):
    s = sigmoid((np.log(u) - np.log1p(-u) + la) / beta)
    r = s * (ZETA - GAMMA) + GAMMA
    dz = (ZETA - GAMMA) * s * (1 - s) / beta if 0 < r < 1 else 0.0
    return float(min(1.0, max(0.0, r))), float(dz)


def test_gate(la):
    r = sigmoid(la) * (ZETA - GAMMA) + GAMMA
    return float(min(1.0, max(0.0, r)))


def l0(la, beta):
    p = sigmoid(la - beta * np.log(-GAMMA / ZETA))
    return float(p), float(p * (1 - p))


def fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


def xoshiro(s):
    r = (rotl((s[1] * 5) & M64, 7) * 9) & M64
    t = (s[1] << 17) & M64
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = rotl(s[3], 45)
    return r


def seeded(seed, study, lam):
    h = 0xCBF29CE484222325
    for c in study.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    bits = struct.unpack("<Q", struct.pack("<d", lam))[0]
    x = seed
    x, z = splitmix64(x)
    x = z ^ h
    x, z = splitmix64(x)
    x = z ^ bits
    s = []
    for _ in range(4):
        x, z = splitmix64(x)
        s.append(z)
    return s


def main():
    las = [-12.0, -5.0, -2.5, -2.3978952727983707, -1.0, -0.3, 0.0, 0.5, 2.0, 2.3978952727983707, 2.6, 4.0, 12.0]
    us = [1e-9, 1e-3, 0.05, 0.3, 0.5, 0.61803, 0.9, 0.999, 1 - 1e-9]
    betas = [2.0 / 3.0, 0.33, 1.0]
    cases = []
    for beta in betas:
        for la in las:
            for u in us:
                z, dz = sample(la, u, beta)
                # the analytic derivative against finite differences, where z is not at a kink
                num = fd(lambda x: sample(x, u, beta)[0], la)
                if 1e-4 < z < 1 - 1e-4:
                    assert abs(num - dz) <= 1e-6 * max(1.0, abs(dz)), (la, u, beta, num, dz)
                cases.append({"log_alpha": la, "u": u, "beta": beta, "z": z, "dz": dz})
    tests = [{"log_alpha": la, "gate": test_gate(la)} for la in las + [-2.39, 2.39, 2.40, -2.40]]
    pens = []
    for beta in betas:
        for la in las:
            p, dp = l0(la, beta)
            assert abs(fd(lambda x: l0(x, beta)[0], la) - dp) <= 1e-7, (la, beta)
            pens.append({"log_alpha": la, "beta": beta, "p": p, "dp": dp})

    # Adam on one parameter through a fixed gradient sequence
    grads = [0.5, -1.25, 0.03, 2.0, -0.7, 0.0, 1e-3, -3.0]
    la, m, v, lr = 3.0, 0.0, 0.0, 0.05
    traj = []
    for t, g in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        la -= lr * (m / (1 - 0.9 ** t)) / (math.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        traj.append(la)
    adam = {"init": 3.0, "lr": lr, "grads": grads, "log_alpha": traj}

    rngs = []
    for seed, study, lam in [(0, "gates", 0.0), (7, "gates", 0.01), (2**64 - 1, "curve-gates", 0.1)]:
        s = seeded(seed, study, lam)
        draws = [((xoshiro(s) >> 11) + 0.5) * 2.0 ** -53 for _ in range(10)]
        rngs.append({"seed": str(seed), "study": study, "lambda": lam, "uniforms": draws})

    with open(OUT, "w") as f:
        json.dump({"gamma": GAMMA, "zeta": ZETA, "sample": cases, "test": tests, "l0": pens, "adam": adam,
                   "rng": rngs}, f, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(cases)} samples, {len(tests)} test-time gates, {len(pens)} penalties, "
          f"{len(grads)} Adam steps, {len(rngs)} noise streams")


if __name__ == "__main__":
    main()
