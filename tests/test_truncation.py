"""A float stored into an integer plane is truncated toward zero, as numpy truncates it: eagle
warns once, naming the kernel, the line and the plane; integer stores are left alone.  The
values are numpy's (``astype`` of the float results)."""
from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out, Param
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.truncation import TruncationWarning


@eagle.kernel
def halve(i, x: In, m: Mutable):
    m[i] = m[i] + x[i] * 0.5


@eagle.kernel
def divided(i, x: In, y: Out["int64"]):
    y[i] = x[i] / 2


@eagle.kernel
def through_a_name(i, x: In, m: Mutable):
    v = x[i] * 2.0
    if v > 1.0:
        m[i] = v


@eagle.kernel
def stepped(i, step: Param, m: Mutable):
    m[i] += step


@eagle.kernel
def integer_stores(i, x: In, m: Mutable, k: Mutable):
    v = int(x[i] * 10.0)
    m[i] = v + round(x[i]) + math.floor(x[i]) + 1
    k[i] = k[i] + 1


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(n for n, line in enumerate(lines) if text in line)


def run(kernel, **planes):
    return eplan.plan(eagle.deploy(kernel), structure=eexec.HostTeam).run(**planes)


def caught(call):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        call()
    return [x for x in w if issubclass(x.category, TruncationWarning)]


def test_a_float_into_an_int_mutable_warns_once_and_truncates_as_numpy():
    x = np.array([0.5, 1.5, 3.0, -3.0, 7.0])
    m = np.arange(5, dtype=np.int64)
    want = (m + x * 0.5).astype(np.int64)
    w = caught(lambda: run(halve, x=x, m=m))
    assert len(w) == 1
    text = str(w[0].message)
    assert "kernel 'halve'" in text and f"line {line_of(halve, 'm[i] = m[i] +')}" in text
    assert "Mutable 'm'" in text and "int64" in text and "m.astype('float64')" in text and len(text) < 300
    assert same_bits(m, want)
    assert w[0].filename == __file__, "the warning points at the caller's run"
    assert caught(lambda: run(halve, x=x, m=np.zeros(5, dtype=np.int64))) == [], "once per kernel and dtypes"
    assert len(caught(lambda: run(halve, x=x, m=np.zeros(5, dtype=np.int32)))) == 1


def test_a_true_division_into_a_declared_int_out():
    x = np.array([1.0, 3.0, -5.0])
    w = caught(lambda: run(divided, x=x))
    assert len(w) == 1 and "Out 'y'" in str(w[0].message)


def test_a_float_through_a_local_name():
    x = np.array([0.2, 0.9, 2.0])
    m = np.zeros(3, dtype=np.int64)
    w = caught(lambda: run(through_a_name, x=x, m=m))
    assert len(w) == 1 and f"line {line_of(through_a_name, 'm[i] = v')}" in str(w[0].message)
    assert same_bits(m, np.where(x * 2.0 > 1.0, x * 2.0, 0).astype(np.int64))


def test_a_float_param_warns_an_int_param_does_not():
    m = np.zeros(4, dtype=np.int64)
    assert caught(lambda: run(stepped, step=2, m=m)) == []
    assert same_bits(m, np.full(4, 2, dtype=np.int64))
    w = caught(lambda: run(stepped, step=2.5, m=m))
    assert len(w) == 1 and "Mutable 'm'" in str(w[0].message)
    assert same_bits(m, np.full(4, 4, dtype=np.int64))          # 2 + 2.5 truncated, as numpy does


def test_integer_stores_and_float_planes_do_not_warn():
    x = np.array([0.25, 1.75, 2.5])
    m, k = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    assert caught(lambda: run(integer_stores, x=x, m=m, k=k)) == []
    assert same_bits(m, np.array([int(v * 10.0) + round(v) + math.floor(v) + 1 for v in x]))
    assert caught(lambda: run(halve, x=x, m=np.zeros(3))) == [], "a float plane holds floats"
