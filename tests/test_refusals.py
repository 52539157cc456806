"""Every refusal: raised before anything launches, naming the plane (quoted), the kernel and
the rule, with the caller's arrays untouched.  And what is not refused: n = 0.  And what a
kernel that raises looks like from the caller's side."""

import inspect
import math
import textwrap

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
import eagle.host
from eagle import Cell, In, Mutable, Out
from eagle import plan as eplan
from tests.kernels import CASES, axpb, histogram, inputs, oscillator, picky, reductions, same_bits, vectors

TABLE = np.arange(4.0)        # a module-level array: kernels may not read it


def host(kernel, **how):
    return eplan.plan(eagle.deploy(kernel), structure=eexec.HostTeam, **how)


def refused(exc, call, *needles, arrays=()):
    """``call()`` raises ``exc`` whose message holds every needle; ``arrays`` are unchanged."""
    copies = [a.copy() for a in arrays]
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} is not in the message: {msg}"
    for a, before in zip(arrays, copies):
        assert same_bits(a, before), "a refused run changed the caller's array"
    return msg


def line_of(kernel, text):
    """The file line number of the first line of ``kernel`` holding ``text``."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# --- run arguments -----------------------------------------------------------------------------

def test_a_missing_plane(no_launch):
    y = np.full(5, 7.0)
    refused(TypeError, lambda: host(axpb).run(a=1.0, b=2.0, y=y), "'x'", "'axpb'", "missing plane",
            arrays=[y])
    d = inputs("oscillator", 6)
    del d["v"]
    refused(TypeError, lambda: host(oscillator).run(**d), "'v'", "'oscillator'", "missing plane", "Mutable",
            arrays=[d["x"], d["omega"]])
    x = np.ones(5)
    refused(TypeError, lambda: host(axpb).run(x=x, b=2.0), "'a'", "'axpb'", "missing Param", arrays=[x])


def test_an_unknown_plane(no_launch):
    x, z = np.ones(5), np.zeros(5)
    refused(TypeError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, z=z), "'z'", "'axpb'", "has no argument",
            arrays=[x, z])


def test_planes_of_different_sample_counts(no_launch):
    d = inputs("oscillator", 10)
    d["x"] = np.ones(11)
    refused(ValueError, lambda: host(oscillator).run(**d), "'omega' has 10", "'x' has 11", "'oscillator'",
            "different sample counts", arrays=[d["omega"], d["x"], d["v"]])
    x, y = np.ones(5), np.full(6, 3.0)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=y), "'x' has 5", "'y' has 6", "'axpb'",
            "different sample counts", arrays=[x, y])


def test_a_param_given_an_array(no_launch):
    x, y = np.ones(5), np.full(5, 3.0)
    refused(TypeError, lambda: host(axpb).run(x=x, a=np.ones(5), b=2.0, y=y), "'a'", "'axpb'", "shape (5,)",
            "one number for all samples", arrays=[x, y])
    refused(TypeError, lambda: host(axpb).run(x=x, a=[1.0], b=2.0, y=y), "'a'", "'axpb'", "a list",
            "one number for all samples", arrays=[x, y])


def test_a_plane_of_the_wrong_rank(no_launch):
    x, y = np.ones((2, 2, 2)), np.full(2, 3.0)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=y), "'x'", "'axpb'", "3 dimensions",
            "(n,) or (n, w)", arrays=[x, y])
    p, q = np.ones(6), np.full((6, 3), 5.0)
    refused(ValueError, lambda: host(vectors).run(p=p, scale=1.0, q=q), "'p'", "'vectors'", "p[i, k]",
            "must be (n, w)", arrays=[p, q])


def test_a_supplied_output_of_the_wrong_dtype_or_shape(no_launch):
    x, y = np.ones(5), np.full(5, 3.0, dtype=np.float32)
    refused(TypeError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=y), "'y'", "'axpb'", "float32",
            "declares it float64", arrays=[x, y])
    k, parity = np.arange(4), np.zeros(4)
    refused(TypeError, lambda: host(CASES["integers"][0]).run(k=k, parity=parity), "'parity'", "'integers'",
            "declares it int64", arrays=[k, parity])
    p, q = np.ones((6, 3)), np.full((6, 2), 5.0)
    refused(ValueError, lambda: host(vectors).run(p=p, scale=1.0, q=q), "'q'", "'vectors'", "Out[3]",
            "(n, 3)", arrays=[p, q])


def test_a_supplied_output_not_c_contiguous(no_launch):
    x, base = np.ones(5), np.full(10, 3.0)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=base[::2]), "'y'", "'axpb'",
            "not C-contiguous", arrays=[x, base])
    d = inputs("oscillator", 5)
    v = np.zeros((5, 2))[:, 0]
    refused(ValueError, lambda: host(oscillator).run(**{**d, "v": v}), "'v'", "'oscillator'",
            "not C-contiguous", arrays=[d["x"], d["omega"]])


def test_a_supplied_output_read_only(no_launch):
    x, y = np.ones(5), np.full(5, 3.0)
    y.setflags(write=False)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=y), "'y'", "'axpb'", "read-only",
            arrays=[x, y])
    d = inputs("oscillator", 5)
    d["x"].setflags(write=False)
    refused(ValueError, lambda: host(oscillator).run(**d), "'x'", "'oscillator'", "read-only",
            arrays=[d["x"], d["v"]])


def test_an_output_sharing_memory_with_an_input(no_launch):
    x = np.arange(5.0)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=x), "'y'", "'x'", "'axpb'",
            "shares memory", arrays=[x])


def test_a_mutable_plane_must_be_an_array(no_launch):
    d = inputs("oscillator", 3)
    refused(TypeError, lambda: host(oscillator).run(**{**d, "x": [1.0, 1.0, 1.0]}), "'x'", "'oscillator'",
            "written in place", arrays=[d["v"]])


def test_a_cell_passed_as_a_plane(no_launch):
    x, total = np.ones(40), np.full(40, 2.0)
    refused(TypeError, lambda: host(reductions).run(x=x, total=total), "'total'", "'reductions'",
            "Cell", "not an input", arrays=[x, total])


# --- plans -------------------------------------------------------------------------------------

def test_cross_sample_write_with_more_than_one_partition():
    for how in ({"npartitions": 2}, {"npartitions": 7}, {"partitions": [(0, 5), (5, 5)]}):
        refused(ValueError, lambda: host(histogram, **how), "'histogram'", "cross_sample_write",
                "one partition only")
    refused(ValueError, lambda: eplan.plan(eagle.deploy(histogram), structure=eexec.RankPartition),
            "'histogram'", "cross_sample_write", "refused at every world size")
    refused(ValueError, lambda: eexec.check_placement("cross_sample_write", eexec.HostTeam, 3, kernel="h"),
            "'h'", "cross_sample_write", "one partition only")
    eexec.check_placement("cross_sample_write", eexec.HostTeam, 1)
    eexec.check_placement("cross_sample_read", eexec.RankPartition, 5)


@eagle.kernel
def dev(i, device: In, y: Out):
    y[i] = device[i]


def test_a_plane_named_device():
    refused(ValueError, lambda: host(dev), "'device'", "'dev'", "reserves")


def test_inner_on_host_team():
    refused(ValueError, lambda: host(axpb, inner=eexec.HostTeam), "inner=", "'axpb'", "HostTeam has no ranks")


@pytest.mark.parametrize("count", [0, -1, 2.0, True, "3"])
def test_npartitions_below_one_or_not_an_integer(count):
    refused(ValueError, lambda: host(axpb, npartitions=count), f"npartitions={count!r}", "'axpb'",
            "at least one partition")


def test_npartitions_and_partitions_together():
    refused(ValueError, lambda: host(axpb, npartitions=2, partitions=[(0, 3)]), "'axpb'", "not both")
    refused(ValueError, lambda: host(axpb, partitions=[]), "'axpb'", "partitions= is empty")


@pytest.mark.parametrize("parts, rule", [
    ([(0, 5), (6, 4)], "a gap at sample 5"),
    ([(1, 9)], "a gap at sample 0"),
    ([(0, 5), (4, 6)], "an overlap at sample 4"),
])
def test_explicit_partitions_with_a_gap_or_an_overlap_are_refused_by_the_plan(parts, rule):
    refused(ValueError, lambda: host(axpb, partitions=parts), "'axpb'", "contiguous", "[0, n)", rule)


@pytest.mark.parametrize("parts, rule", [
    ([(0, 5), (5, 3)], "they end at 8"),
    ([(0, 6), (6, 6)], "they end at 12"),
])
def test_explicit_partitions_that_do_not_cover_the_planes(parts, rule, no_launch):
    x, y = np.arange(10.0), np.full(10, 4.0)
    p = host(axpb, partitions=parts)
    refused(ValueError, lambda: p.run(x=x, a=1.0, b=2.0, y=y), "'axpb'", "contiguous", "[0, 10)", rule,
            arrays=[x, y])


def test_explicit_partitions_of_the_wrong_form(no_launch):
    x = np.arange(10.0)
    refused(TypeError, lambda: host(axpb, partitions=[(0, 5.0), (5, 5)]).run(x=x, a=1.0, b=2.0), "'axpb'",
            "integer base and count", arrays=[x])
    refused(ValueError, lambda: host(axpb, partitions=[(0, 12), (12, -2)]).run(x=x, a=1.0, b=2.0), "'axpb'",
            "negative", arrays=[x])


def test_device_given_to_a_host_team_plan(no_launch):
    x, y = np.arange(4.0), np.full(4, 9.0)
    refused(ValueError, lambda: host(axpb).run(device=0, x=x, a=1.0, b=2.0, y=y), "device=0", "'axpb'",
            "HostTeam runs on CPU threads", arrays=[x, y])


def test_a_structure_that_is_not_one():
    refused(TypeError, lambda: eplan.plan(eagle.deploy(axpb), structure="host"), "'host'", "'axpb'",
            "not an execution structure")


# --- kernels refused at decoration or deploy ---------------------------------------------------

@eagle.kernel
def reads_other_out(i, x: In, y: Out):
    y[i] = x[i]
    if i > 0:
        y[i] = y[i - 1] + x[i]


@eagle.kernel
def reads_other_mutable(i, x: In, v: Mutable):
    n = x.shape[0]
    v[i] = v[(i + 1) % n] * x[i]


def test_reading_another_samples_out_or_mutable():
    for k, plane, text, kind in ((reads_other_out, "y", "y[i - 1]", "Out"),
                                 (reads_other_mutable, "v", "v[(i + 1) % n]", "Mutable")):
        refused(ValueError, lambda: eagle.deploy(k), f"'{plane}'", f"'{k.name}'",
                f"line {line_of(k, text)}", f"reads another sample's {kind} plane", "a race")


@eagle.kernel
def cell_added_to(i, x: In, s: Cell["sum"]):
    s[i] += x[i]


@eagle.kernel
def cell_elsewhere(i, x: In, s: Cell["sum"]):
    s[i - 1] = x[i]


@eagle.kernel
def cell_read(i, x: In, s: Cell["sum"], y: Out):
    s[i] = x[i]
    y[i] = s[i]


@eagle.kernel
def cell_aliased(i, x: In, s: Cell["sum"]):
    t = s
    t[i] = x[i]


@eagle.kernel
def cell_shape(i, x: In, s: Cell["sum"]):
    s[i] = x[i] / s.shape[0]


@eagle.kernel
def cell_unpacked(i, x: In, s: Cell["sum"], y: Out):
    s[i], y[i] = x[i], x[i]


@pytest.mark.parametrize("k, text", [(cell_added_to, "s[i] +="), (cell_elsewhere, "s[i - 1] ="),
                                     (cell_read, "y[i] = s[i]"), (cell_aliased, "t = s"),
                                     (cell_shape, "s.shape"), (cell_unpacked, "s[i], y[i]")])
def test_a_cell_written_other_than_cell_i_equals_value(k, text):
    refused(ValueError, lambda: eagle.deploy(k), "'s'", f"'{k.name}'", f"line {line_of(k, text)}",
            "may only be written as s[i] = value")


def test_an_unknown_cell_op(tmp_path, monkeypatch):
    refused(ValueError, lambda: Cell["avg"], "'avg'", "unknown cell op", "sum, times, max, min, land")
    with pytest.raises(ValueError, match="unknown cell op 'avg'"):
        @eagle.kernel
        def averaged(i, x: In, s: Cell["avg"]):
            s[i] = x[i]
    # with postponed annotations the decorator evaluates them, and can name the kernel and the plane
    (tmp_path / "postponed_avg.py").write_text(textwrap.dedent("""
        from __future__ import annotations
        import eagle
        from eagle import In, Cell

        def averaged(i, x: In, s: Cell["avg"]):
            s[i] = x[i]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import postponed_avg
    refused(TypeError, lambda: eagle.kernel(postponed_avg.averaged), "'averaged'", "'s'", "unknown cell op 'avg'")


def test_a_cell_without_its_op():
    with pytest.raises(TypeError) as info:
        @eagle.kernel
        def bare(i, x: In, s: Cell):
            s[i] = x[i]
    assert "'bare'" in str(info.value) and "'s'" in str(info.value) and "Cell['sum']" in str(info.value)


def test_a_kernel_whose_first_parameter_is_annotated():
    with pytest.raises(TypeError) as info:
        @eagle.kernel
        def annotated_index(i: In, x: In, y: Out):
            y[i] = x[i]
    for needle in ("'annotated_index'", "'i'", "first parameter", "sample index", "no annotation"):
        assert needle in str(info.value)


def test_a_kernel_whose_other_parameters_are_not_annotated():
    with pytest.raises(TypeError) as info:
        @eagle.kernel
        def unannotated(i, x, y: Out):
            y[i] = x[i]
    for needle in ("'unannotated'", "'x'", "has no role", "In, Out, Mutable, Param or Cell[op]"):
        assert needle in str(info.value)
    with pytest.raises(TypeError) as info:
        @eagle.kernel
        def not_a_role(i, x: float, y: Out):
            y[i] = x[i]
    for needle in ("'not_a_role'", "'x'", "not a role"):
        assert needle in str(info.value)


@eagle.kernel
def reads_table(i, x: In, y: Out):
    y[i] = x[i] * TABLE[1]


def test_a_kernel_reading_a_module_level_array():
    refused(ValueError, lambda: eagle.deploy(reads_table), "'TABLE'", "'reads_table'", "module-level array",
            "pass it as a plane")


def test_a_kernel_whose_source_cannot_be_read():
    namespace = {"In": In, "Out": Out}
    exec("def made_by_exec(i, x: In, y: Out):\n    y[i] = x[i]\n", namespace)
    refused(ValueError, lambda: eagle.kernel(namespace["made_by_exec"]), "'made_by_exec'",
            "source cannot be read", "exec")


def test_access_may_not_narrow_what_the_body_does():
    narrowed = eagle.kernel(histogram.fn, access="sample_local")
    refused(ValueError, lambda: eagle.deploy(narrowed), "'histogram'", "narrower", "cross_sample_write")
    refused(ValueError, lambda: eagle.deploy(eagle.kernel(axpb.fn, access="mapreduce")), "'axpb'",
            "access='mapreduce'", "every output to be a Cell")
    refused(ValueError, lambda: eagle.deploy(eagle.kernel(axpb.fn, access="everything")), "'axpb'",
            "unknown access 'everything'")


# --- names the body uses: defined, and helpers not nested too deep ----------------------------

@eagle.kernel
def uses_undefined(i, x: In, y: Out):
    y[i] = x[i] * NOT_DEFINED_ANYWHERE  # noqa: F821 - the refusal under test


def _scaled_by_undefined(v):
    return v * ALSO_NOT_DEFINED  # noqa: F821 - the refusal under test


@eagle.kernel
def helper_uses_undefined(i, x: In, y: Out):
    y[i] = _scaled_by_undefined(x[i])


def test_an_undefined_name_in_the_body_is_refused_at_deploy(monkeypatch):
    refused(NameError, lambda: eagle.deploy(uses_undefined), "kernel 'uses_undefined'",
            "'NOT_DEFINED_ANYWHERE'", "not defined where the kernel is")
    # defined before deploy, it is frozen like any module-level number
    monkeypatch.setitem(globals(), "NOT_DEFINED_ANYWHERE", 2.5)
    x = np.arange(5.0)
    assert same_bits(host(uses_undefined).run(x=x), x * 2.5)


def test_an_undefined_name_in_a_helper_is_refused_naming_the_helper():
    refused(NameError, lambda: eagle.deploy(helper_uses_undefined), "kernel 'helper_uses_undefined'",
            "'ALSO_NOT_DEFINED'", "not defined where helper '_scaled_by_undefined' is")


def _helper_chain(tmp_path, monkeypatch, depth):
    """A module with a kernel calling helpers ``h0 -> h1 -> ... -> h{depth-1}`` (plain functions,
    compiled from source with the kernel); each adds 1.0, so the kernel computes x + depth."""
    name = f"helper_chain_{depth}"
    lines = ["import eagle", "from eagle import In, Out", ""]
    for k in range(depth):
        inner = f"h{k + 1}(v)" if k + 1 < depth else "v"
        lines += [f"def h{k}(v):", f"    return {inner} + 1.0", ""]
    lines += ["@eagle.kernel", "def deep(i, x: In, y: Out):", "    y[i] = h0(x[i])", ""]
    (tmp_path / f"{name}.py").write_text("\n".join(lines))
    monkeypatch.syspath_prepend(str(tmp_path))
    return __import__(name).deep


def test_helpers_nested_too_deep_are_refused_at_deploy(tmp_path, monkeypatch):
    from eagle.freeze import MAX_HELPER_DEPTH as MAX
    x = np.arange(6.0)
    fine = _helper_chain(tmp_path, monkeypatch, MAX)
    assert same_bits(host(fine).run(x=x), x + MAX)
    deep = _helper_chain(tmp_path, monkeypatch, MAX + 1)
    refused(ValueError, lambda: eagle.deploy(deep), "kernel 'deep'",
            f"helper functions nest more than {MAX} deep", f"(at 'h{MAX}')")   # h0 .. h{MAX}: one too many


# --- the thread team ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, rule", [("abc", "is not a number of threads"),
                                         ("0", "a team has at least one thread"),
                                         ("-2", "a team has at least one thread"),
                                         ("1.5", "is not a number of threads")])
def test_a_bad_eagle_num_threads_is_refused_before_anything_runs(value, rule, monkeypatch):
    monkeypatch.setenv("EAGLE_NUM_THREADS", value)
    with pytest.raises(ValueError, match=rule):
        eagle.host.num_threads()
    x, y = np.arange(50.0), np.full(50, 3.0)
    refused(ValueError, lambda: host(axpb).run(x=x, a=1.0, b=2.0, y=y), f"EAGLE_NUM_THREADS={value!r}", rule,
            arrays=[x, y])
    d = inputs("histogram", 40)                              # one thread whatever the team: refused too
    refused(ValueError, lambda: host(histogram).run(**d), f"EAGLE_NUM_THREADS={value!r}", rule,
            arrays=[d["x"]])


def test_eagle_num_threads_unset_or_empty_is_every_cpu(monkeypatch):
    monkeypatch.delenv("EAGLE_NUM_THREADS", raising=False)
    assert eagle.host.num_threads() == eagle.host.cpu_count() >= 1
    monkeypatch.setenv("EAGLE_NUM_THREADS", "")
    assert eagle.host.num_threads() == eagle.host.cpu_count()
    monkeypatch.setenv("EAGLE_NUM_THREADS", "3")
    assert eagle.host.num_threads() == 3


# --- not refused: no samples -------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_no_samples_is_not_an_error(name, team):
    team(3)
    plugin = eagle.deploy(CASES[name][0])
    out = eplan.plan(plugin, structure=eexec.HostTeam).run(**inputs(name, 0))
    out = out if isinstance(out, dict) else {plugin.outputs[0]: out}
    identity = {"sum": 0.0, "times": 1.0, "max": -math.inf, "min": math.inf, "land": 1.0}
    for role, arg in plugin.arg_spec:
        if role.kind == "Cell":
            assert same_bits(out[arg], np.float64(identity[role.op])), arg
        elif role.kind in ("Out", "Mutable"):
            assert out[arg].shape[0] == 0 and out[arg].dtype == (role.out_dtype if role.kind == "Out"
                                                                 else np.float64), arg
            if role.width is not None:
                assert out[arg].shape == (0, role.width)


# --- a kernel that raises ----------------------------------------------------------------------

@eagle.kernel
def slow_picky(i, x: In, work: In, y: Out):
    acc = 0.0
    for k in range(work[i]):
        acc += math.sqrt(k + x[i] * x[i])
    if x[i] < 0.0:
        raise ValueError("negative input")
    y[i] = acc


@eagle.kernel
def divides(i, x: In, y: Out):
    if x[i] == 0.0:
        raise ZeroDivisionError("a zero sample")
    y[i] = 1.0 / x[i]


def test_a_kernel_that_raises_names_itself_and_the_sample(team):
    x = np.arange(1.0, 101.0)
    x[[57, 58, 90]] = -1.0
    with pytest.raises(ValueError) as info:
        host(picky).run(x=x)
    assert type(info.value) is ValueError
    for needle in ("negative input", "'picky'", "sample 57"):
        assert needle in str(info.value)
    x[[57, 58, 90]] = 0.0
    with pytest.raises(ZeroDivisionError, match=r"a zero sample \[kernel 'divides', sample 57\]"):
        host(divides, npartitions=3).run(x=x)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_team_reports_the_first_failing_sample_in_sample_order(threads, team):
    """Chunks fail at samples 100, 400, 700 and 950; the chunk of sample 100 is slow to get there."""
    team(threads)
    n = 1000
    x, work = np.linspace(1.0, 2.0, n), np.zeros(n, dtype=np.int64)
    x[[100, 101, 400, 700, 950]] = -1.0
    work[100] = 20_000_000
    for how in ({}, {"npartitions": 2}, {"partitions": [(0, 333), (333, 667)]}):
        with pytest.raises(ValueError, match=r"negative input \[kernel 'slow_picky', sample 100\]"):
            host(slow_picky, **how).run(x=x, work=work)


# --- stateful randomness and clocks: refused at deploy ---------------------------------------------
import random as _py_random  # noqa: E402
import time as _time  # noqa: E402
from numpy.random import default_rng as _default_rng  # noqa: E402


@eagle.kernel
def numpy_draw(i, x: In, y: Out):
    y[i] = x[i] + np.random.random()


@eagle.kernel
def python_draw(i, x: In, y: Out):
    y[i] = x[i] + _py_random.random()


@eagle.kernel
def clock(i, x: In, y: Out):
    y[i] = x[i] + _time.time()


@eagle.kernel
def generator_made_inside(i, x: In, y: Out):
    y[i] = x[i] + _default_rng(i).random()


def _jitter(v):
    return v + np.random.normal()


@eagle.kernel
def helper_draw(i, x: In, y: Out):
    y[i] = _jitter(x[i])


@pytest.mark.parametrize("kernel, what, where", [
    (numpy_draw, "numpy.random", "np.random.random()"),
    (python_draw, "random.random", "_py_random.random()"),
    (clock, "time.time", "_time.time()"),
    (generator_made_inside, "numpy.random", "_default_rng(i)"),
])
def test_stateful_randomness_and_clocks_are_refused_at_deploy(kernel, what, where):
    msg = refused(ValueError, lambda: eagle.deploy(kernel), repr(kernel.name), what, "eagle.random",
                  f"line {line_of(kernel, where)}")
    assert "split" in msg


def test_stateful_randomness_in_a_helper_is_refused_naming_the_helper():
    refused(ValueError, lambda: eagle.deploy(helper_draw), "'helper_draw'", "helper '_jitter'", "numpy.random",
            "eagle.random")
