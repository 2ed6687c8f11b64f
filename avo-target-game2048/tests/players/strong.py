"""Test-only reference player: depth-limited expectimax with a row-table heuristic,
a transposition cache per move, a probability cut-off and merge points in the value."""

_C = [[(r >> 12) & 15, (r >> 8) & 15, (r >> 4) & 15, r & 15] for r in range(65536)]


def _slide(c):
    t = [v for v in c if v]
    out, pts, i = [], 0, 0
    while i < len(t):
        if i + 1 < len(t) and t[i] == t[i + 1] and t[i] < 15:
            out.append(t[i] + 1)
            pts += 1 << (t[i] + 1)
            i += 2
        else:
            out.append(t[i])
            i += 1
    out += [0] * (4 - len(out))
    return (out[0] << 12) | (out[1] << 8) | (out[2] << 4) | out[3], pts


def _heur(c):
    empty = c.count(0)
    merges, prev, run = 0, 0, 0
    for v in c:
        if v == 0:
            continue
        if v == prev:
            run += 1
        elif run:
            merges += 1 + run
            run = 0
        prev = v
    if run:
        merges += 1 + run
    lft = rgt = 0.0
    for i in range(3):
        if c[i] > c[i + 1]:
            lft += c[i] ** 4 - c[i + 1] ** 4
        else:
            rgt += c[i + 1] ** 4 - c[i] ** 4
    return 200000.0 + 270.0 * empty + 700.0 * merges - 47.0 * min(lft, rgt) - 11.0 * sum(v ** 3.5 for v in c)


_L = [0] * 65536
_LP = [0] * 65536
for _r in range(65536):
    _L[_r], _LP[_r] = _slide(_C[_r])
_REV = [(c[3] << 12) | (c[2] << 8) | (c[1] << 4) | c[0] for c in _C]
_R = [_REV[_L[_REV[r]]] for r in range(65536)]
_RP = [_LP[_REV[r]] for r in range(65536)]
_H = [_heur(c) for c in _C]


def _tr(x):
    a = (x & 0xF0F00F0FF0F00F0F) | ((x & 0x0000F0F00000F0F0) << 12) | ((x & 0x0F0F00000F0F0000) >> 12)
    return (a & 0xFF00FF0000FF00FF) | ((a & 0x00FF00FF00000000) >> 24) | ((a & 0x00000000FF00FF00) << 24)


def _rows(b, t, p):
    r0, r1, r2, r3 = b >> 48, (b >> 32) & 0xFFFF, (b >> 16) & 0xFFFF, b & 0xFFFF
    return (t[r0] << 48) | (t[r1] << 32) | (t[r2] << 16) | t[r3], p[r0] + p[r1] + p[r2] + p[r3]


def _moves(b):
    t = _tr(b)
    out = []
    for n, p in (_rows(b, _L, _LP), _rows(b, _R, _RP)):
        if n != b:
            out.append((n, p))
    for n, p in (_rows(t, _L, _LP), _rows(t, _R, _RP)):
        if n != t:
            out.append((_tr(n), p))
    return out


def _value(b):
    t = _tr(b)
    h = _H
    return (h[b >> 48] + h[(b >> 32) & 0xFFFF] + h[(b >> 16) & 0xFFFF] + h[b & 0xFFFF]
            + h[t >> 48] + h[(t >> 32) & 0xFFFF] + h[(t >> 16) & 0xFFFF] + h[t & 0xFFFF])


def _chance(b, depth, prob, cache):
    key = (b, depth)
    if key in cache:
        return cache[key]
    if depth == 0 or prob < 0.01:
        v = _value(b)
        cache[key] = v
        return v
    empties = [s for s in range(0, 64, 4) if not (b >> s) & 15]
    if not empties:
        v = _value(b)
        cache[key] = v
        return v
    n = len(empties)
    total = 0.0
    for s in empties:
        total += 0.9 * _max(b | (1 << s), depth - 1, prob * 0.9 / n, cache)
        total += 0.1 * _max(b | (2 << s), depth - 1, prob * 0.1 / n, cache)
    v = total / n
    cache[key] = v
    return v


def _max(b, depth, prob, cache):
    best = 0.0
    for n, p in _moves(b):
        v = _chance(n, depth, prob, cache) + 2.0 * p
        if v > best:
            best = v
    return best


def choose_move(grid):
    b = 0
    for row in grid:
        for v in row:
            b = (b << 4) | (v.bit_length() - 1 if v else 0)
    empty = sum(1 for row in grid for v in row if v == 0)
    depth = 1 if empty > 3 else 2
    cache: dict = {}
    best, best_v = None, -1.0
    for d in "LRUD":
        if d in "LR":
            n, p = _rows(b, _L if d == "L" else _R, _LP if d == "L" else _RP)
        else:
            n, p = _rows(_tr(b), _L if d == "U" else _R, _LP if d == "U" else _RP)
            n = _tr(n)
        if n == b:
            continue
        v = _chance(n, depth, 1.0, cache) + 2.0 * p
        if v > best_v:
            best, best_v = d, v
    return best
