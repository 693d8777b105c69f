"""The benchmark's report code on synthetic numbers: statistics, goals, JSON, markdown, plots."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from bench import flamegraph, goals, phases, profile, readme, report
from bench.stats import per_second, percentile, ratio, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def latency(p50_ms: float, p99_ms: float | None = None, n: int = 100) -> dict[str, Any]:
    """A summary whose p50 and p99 are as given (built from real samples)."""
    p99 = p99_ms if p99_ms is not None else p50_ms * 2
    samples = [p50_ms / 1000] * 98 + [p99 / 1000] * 2
    return summarize(samples[:n] if n < 100 else samples)


def parts_meeting_every_goal() -> dict[str, Any]:
    return {
        "decision": {
            "execute_read": latency(1.4),
            "execute_read_fresh": latency(1.15),
            "health": latency(0.5),
            "opa": latency(0.5),
        },
        "readonly": {
            "clients": 32,
            "duration_s": 30.0,
            "calls": 60_000,
            "calls_per_s": 2000.0,
            "errors": 0,
            "latency": latency(5, 15),
            "daemon_cpu_s": 30.0,
            "daemon_children_cpu_s": 4.0,
            "series": [2000] * 30,
        },
        "floor": {
            "clients": 32,
            "duration_s": 10.0,
            "calls": 30_000,
            "calls_per_s": 2900.0,
            "daemon_cpu_s": 9.0,
        },
        "sandbox": {
            "warm": latency(15),
            "docker_run": latency(600),
            "docker_exec": latency(80),
            "llm_sandbox": latency(75),
            "phases": {
                "phases_ms": {"decision": 2.0, "pool_take": 0.1, "runner_exited": 3.0},
                "daemon_ms": 5.1,
                "client_mean_ms": 6.0,
                "outside_daemon_ms": 0.9,
                "outside_floor_ms": 0.6,
            },
            "machine_load": {"cpu_busy": 0.87, "loadavg_1m_start": 1.5, "loadavg_1m_end": 2.25},
        },
        "cold": {"cold": latency(500), "docker_run": latency(600)},
        "churn": {
            "clients": 4,
            "duration_s": 60.0,
            "calls": 900,
            "calls_per_s": 15.0,
            "errors": 0,
            "leaked_running": 0,
            "leaked_after_stop": 0,
            "latency": latency(250),
            "daemon_cpu_s": 9.0,
            "series": [15] * 60,
        },
        "engine_churn": {"workers": 4, "containers": 960, "containers_per_s": 10.5, "errors": 0},
        "batch": {"files": 20_000, "batch": latency(100), "sequential": latency(200)},
        "flood": {
            "bytes": 1 << 30,
            "result_chars": 29_998,
            "budget_chars": 30_000,
            "rss_growth_mib": 10.0,
            "daemon_s": 4.0,
            "docker_run_s": 20.0,
        },
        "egress": {
            "connects": 500,
            "download_bytes": 100 << 20,
            "setup_direct_p50_ms": 0.1,
            "setup_proxy_p50_ms": 2.0,
            "decision_p50_ms": 1.0,
            "direct_mb_s": 1000.0,
            "tunnel_mb_s": 700.0,
            "tls_direct_mb_s": 500.0,
            "intercepted_mb_s": 200.0,
        },
    }


def by_id(parts: dict[str, Any]) -> dict[str, goals.Metric]:
    return {m.id: m for m in goals.evaluate(parts)}


def test_percentile_is_nearest_rank() -> None:
    samples = list(range(1, 101))  # 1..100
    assert percentile(samples, 50) == 50
    assert percentile(samples, 99) == 99
    assert percentile(samples, 100) == 100
    assert percentile(samples, 0) == 1
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_summary_is_in_milliseconds_with_a_full_cdf() -> None:
    summary = summarize([0.001 * i for i in range(1, 201)])  # 1..200 ms
    assert summary["n"] == 200
    assert summary["p50_ms"] == pytest.approx(100)
    assert summary["p99_ms"] == pytest.approx(198)
    assert summary["max_ms"] == pytest.approx(200)
    assert len(summary["cdf_ms"]) == 101
    assert summary["cdf_ms"] == sorted(summary["cdf_ms"])
    assert summarize([]) == {"n": 0}


def test_per_second_buckets_put_late_completions_last() -> None:
    assert per_second([0.1, 0.9, 1.0, 2.5, 3.7, -0.1], duration_s=3) == [2, 1, 2]


def test_ratio_refuses_missing_or_zero_denominators() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(1.0, 0.0) is None


def test_every_goal_met() -> None:
    metrics = by_id(parts_meeting_every_goal())
    with_goal = [m for m in metrics.values() if m.goal != "-"]
    assert len(with_goal) == 19
    assert all(m.met is True for m in with_goal), [m for m in with_goal if not m.met]
    assert metrics["decision.p50_ratio"].value == pytest.approx(1.4)
    assert metrics["decision.fresh_p50_ratio"].value == pytest.approx(1.15)
    assert metrics["sandbox.warm_ratio"].value == pytest.approx(15 / 600)
    assert metrics["sandbox.docker_exec_ratio"].value == pytest.approx(15 / 80)
    assert metrics["sandbox.llm_sandbox_ratio"].value == pytest.approx(15 / 75)
    assert metrics["churn.engine_ratio"].value == pytest.approx(15 / 10.5)
    assert metrics["readonly.floor_ratio"].value == pytest.approx(2000 / 2900)
    assert metrics["cpu.readonly_ratio"].value == pytest.approx(0.5 / 0.3)
    assert metrics["batch.speedup"].value == pytest.approx(2.0)
    assert metrics["cpu.readonly_ms"].value == pytest.approx(0.5)
    assert metrics["cpu.sandboxed_ms"].value == pytest.approx(10)
    assert metrics["flood.time_ratio"].value == pytest.approx(0.2)
    assert metrics["cpu.readonly_ms"].met is None


def test_what_asking_opa_adds_to_a_read_is_set_against_opas_own_query() -> None:
    parts = parts_meeting_every_goal()
    parts["decision"].update(execute_read=latency(1.1), execute_read_fresh=latency(1.9))
    query = by_id(parts)["decision.query_ratio"]
    assert query.value == pytest.approx((1.9 - 1.1) / 0.5)
    assert query.met is None
    assert "0.6 ms" in query.detail, "the same Read's own work beyond a health Check"
    del parts["decision"]["opa"]
    assert by_id(parts)["decision.query_ratio"].value is None


def test_the_read_only_ceiling_charges_the_daemon_a_health_check_per_call() -> None:
    parts = parts_meeting_every_goal()
    parts["readonly"].update(cpus=2, client_cpu_s=30.0, opa_cpu_s=6.0)  # 0.5 and 0.1 ms per call
    ceiling = by_id(parts)["readonly.ceiling_ratio"]
    # ripgrep 4 s / 60,000 calls, client 0.5 ms, OPA 0.1 ms, a Check 9 s / 30,000 calls.
    per_call_ms = 4000 / 60_000 + 0.5 + 0.1 + 0.3
    assert ceiling.value == pytest.approx(2 * 1000 / per_call_ms / 2900)
    assert ceiling.met is None and "2 CPUs" in ceiling.detail
    del parts["readonly"]["cpus"]
    assert by_id(parts)["readonly.ceiling_ratio"].value is None


def test_the_warm_floor_adds_a_round_trip_a_decision_and_the_containers_own_phases() -> None:
    parts = parts_meeting_every_goal()
    container = dict.fromkeys(phases.CONTAINER_PHASES, 0.5)  # 3 ms in all
    parts["sandbox"]["phases"]["phases_ms"] = {"decision": 2.0, **container}
    floor = by_id(parts)["sandbox.warm_floor_ratio"]
    assert floor.value == pytest.approx((0.6 + 0.5 + 3.0) / 600)
    assert floor.met is None and "4.1 ms" in floor.detail
    assert "a Read's" in floor.detail
    # With the warm calls' own decision asked of OPA as they are started, that is the one used.
    parts["sandbox"]["opa_bash_spaced"] = latency(2.5)
    floor = by_id(parts)["sandbox.warm_floor_ratio"]
    assert floor.value == pytest.approx((0.6 + 2.5 + 3.0) / 600)
    assert "the same Bash decision" in floor.detail
    # The goal's row names a floor above the goal as the reason it cannot be met.
    parts["sandbox"]["opa_bash_spaced"] = latency(30.0)
    assert "past this run's floor" in by_id(parts)["sandbox.warm_ratio"].detail
    parts["sandbox"]["opa_bash_spaced"] = latency(2.5)
    assert "past this run's floor" not in by_id(parts)["sandbox.warm_ratio"].detail
    del parts["sandbox"]["phases"]["phases_ms"]["result"]  # a phase missing: no floor guessed
    assert by_id(parts)["sandbox.warm_floor_ratio"].value is None
    del parts["decision"]
    del parts["sandbox"]["opa_bash_spaced"]
    assert "not measured" in by_id(parts)["sandbox.warm_floor_ratio"].detail


@pytest.mark.parametrize(
    ("path", "value", "metric_id"),
    [
        (("decision", "execute_read"), latency(1.6), "decision.p50_ratio"),
        (("decision", "execute_read_fresh"), latency(1.25), "decision.fresh_p50_ratio"),
        (("readonly", "calls_per_s"), 1499.0, "readonly.calls_per_s"),
        (("readonly", "latency"), latency(5, 20), "readonly.p99_ms"),
        (("readonly", "errors"), 1, "readonly.errors"),
        (("sandbox", "docker_run"), latency(490), "sandbox.warm_ratio"),
        (("floor", "calls_per_s"), 4001.0, "readonly.floor_ratio"),
        (("floor", "daemon_cpu_s"), 7.4, "cpu.readonly_ratio"),
        (("engine_churn", "containers_per_s"), 16.7, "churn.engine_ratio"),
        (("cold", "cold"), latency(661), "sandbox.cold_ratio"),
        (("churn", "calls_per_s"), 9.9, "churn.calls_per_s"),
        (("churn", "errors"), 2, "churn.errors"),
        (("churn", "leaked_after_stop"), 1, "churn.leaked"),
        (("batch", "batch"), latency(112), "batch.speedup"),
        (("flood", "result_chars"), 30_001, "flood.result_chars"),
        (("flood", "result_chars"), 29_000, "flood.result_chars"),
        (("flood", "rss_growth_mib"), 64.0, "flood.rss_growth_mib"),
        (("egress", "setup_proxy_p50_ms"), 2.2, "egress.setup_overhead_ms"),
        (("egress", "tunnel_mb_s"), 699.0, "egress.tunnel_ratio"),
        (("egress", "intercepted_mb_s"), 199.0, "egress.intercepted_ratio"),
    ],
)
def test_each_goal_can_fail(path: tuple[str, str], value: Any, metric_id: str) -> None:
    parts = parts_meeting_every_goal()
    parts[path[0]][path[1]] = value
    metrics = by_id(parts)
    assert metrics[metric_id].met is False
    assert [m.id for m in metrics.values() if m.met is False] == [metric_id]


def test_missing_parts_are_not_measured_never_met() -> None:
    metrics = goals.evaluate({})
    assert metrics
    assert all(m.value is None and m.met is None for m in metrics)


def results(parts: dict[str, Any]) -> dict[str, Any]:
    return report.build_results(
        parts,
        {
            "mode": "full",
            "started": "2026-01-01T00:00:00+00:00",
            "duration_s": 300.0,
            "machine": {"cpus": 2, "git_revision": "abc1234"},
            "failures": [{"part": "flood", "error": "RuntimeError: boom | pipe"}],
            "notes": ["measured on synthetic numbers"],
        },
    )


def test_markdown_table_has_every_metric_with_its_verdict() -> None:
    parts = parts_meeting_every_goal()
    parts["readonly"]["calls_per_s"] = 700.0
    text = report.render_markdown(results(parts))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    throughput = next(r for r in rows if r.startswith("| read-only throughput |"))
    assert "| 700 calls/s | at least 1500 | **not met** |" in throughput
    decision = next(r for r in rows if r.startswith("| decision overhead"))
    assert "| 1.4 × | at most 1.5 × | met |" in decision
    cpu = next(r for r in rows if r.startswith("| daemon CPU per read-only call"))
    assert "| 0.5 ms | - | - |" in cpu
    assert "RuntimeError: boom \\| pipe" in text  # a pipe in a message cannot break the table
    assert "| decision: Execute(Read 1 KB), decision reused | 100 | 1.40 |" in text
    assert "- measured on synthetic numbers" in text
    assert "| sandbox | 87% | 1.5 -> 2.2 |" in text


def test_write_all_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    document = results(parts_meeting_every_goal())
    written = report.write_all(document, tmp_path / "out")
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "latest.json",
            "latest.md",
            "latency-decision.png",
            "latency-readonly.png",
            "latency-sandbox.png",
            "latency-batch.png",
            "throughput.png",
        ]
    )
    for path in written:
        if path.suffix == ".png":
            assert path.read_bytes().startswith(PNG_MAGIC)
            assert path.stat().st_size > 5_000
    loaded = json.loads((tmp_path / "out" / "latest.json").read_text())
    assert loaded["schema"] == report.SCHEMA_VERSION
    assert loaded["parts"]["readonly"]["calls_per_s"] == 2000.0
    met = {m["id"]: m["met"] for m in loaded["metrics"]}
    assert met["readonly.calls_per_s"] is True
    assert met["cpu.sandboxed_ms"] is None


def test_plots_skip_what_was_not_measured(tmp_path: Path) -> None:
    parts = {"decision": parts_meeting_every_goal()["decision"]}
    written = report.plot_all(results(parts), tmp_path)
    assert [p.name for p in written] == ["latency-decision.png"]


def test_profile_summary_counts_self_and_inclusive_samples() -> None:
    collapsed = "\n".join(
        [
            'process 1:"python";main (a.py:1);handle (b.py:10);decide (c.py:5) 30',
            'process 1:"python";main (a.py:1);handle (b.py:12);audit (d.py:7) 10',
            'process 1:"python";main (a.py:2) 10',
            "garbage line",
        ]
    )
    summary = profile.summarize_collapsed(collapsed)
    assert summary.samples == 50
    assert summary.self_top[0] == ("decide (c.py)", 30)
    inclusive = dict(summary.inclusive_top)
    assert inclusive["main (a.py)"] == 50
    assert inclusive["handle (b.py)"] == 40  # two lines of one function count once per stack
    text = profile.render(summary, "t")
    assert "| 60.0% | 30 | `decide (c.py)` |" in text


def test_markdown_shows_where_a_warm_sandboxed_call_goes() -> None:
    text = report.render_markdown(results(parts_meeting_every_goal()))
    assert "| decision | 2.00 | policy decision |" in text
    assert "| runner_exited | 3.00 |" in text
    assert "| outside the daemon | 0.90 | client mean 6.00 ms minus the phases |" in text
    assert "| its floor: a health Check | 0.60 |" in text


def test_readme_table_is_written_between_its_markers_only() -> None:
    before = f"# tooljail\n\nintro\n{readme.BEGIN}\nold table\n{readme.END}\n\nafter\n"
    written = readme.rewrite(before, results(parts_meeting_every_goal()))
    assert written.startswith("# tooljail\n\nintro\n")
    assert written.endswith(f"{readme.END}\n\nafter\n")
    assert "old table" not in written
    table = written.split(readme.BEGIN)[1].split(readme.END)[0]
    assert "commit abc1234" in table
    assert "| sandboxed latency, warm pool: p50 / docker run p50 (same loop) | 0.025 × |" in table
    assert table.count("\n| ") == len(goals.evaluate(parts_meeting_every_goal())) + 1
    # Rewriting again changes nothing: the table is a function of the results.
    assert readme.rewrite(written, results(parts_meeting_every_goal())) == written


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        f"{readme.END}\n{readme.BEGIN}\n",
        f"{readme.BEGIN}\n{readme.BEGIN}\n{readme.END}\n",
    ],
)
def test_readme_without_its_markers_in_order_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="needs exactly one"):
        readme.rewrite(text, results(parts_meeting_every_goal()))


METRICS_TEXT = """\
# HELP tooljail_call_phase_seconds Where the time went.
tooljail_call_phase_seconds_bucket{le="0.001",phase="decision",tool="Bash"} 3.0
tooljail_call_phase_seconds_sum{phase="decision",tool="Bash"} 0.006
tooljail_call_phase_seconds_count{phase="decision",tool="Bash"} 3.0
tooljail_call_phase_seconds_sum{phase="cold_start",tool="Bash"} 0.5
tooljail_call_phase_seconds_count{phase="cold_start",tool="Bash"} 1.0
tooljail_call_phase_seconds_sum{phase="decision",tool="Read"} 9.0
tooljail_call_phase_seconds_count{phase="decision",tool="Read"} 9.0
"""


def test_phase_means_are_per_call_between_two_scrapes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Answer(io.BytesIO):
        def __enter__(self) -> Answer:
            return self

    monkeypatch.setattr(
        phases.urllib.request, "urlopen", lambda url, timeout: Answer(METRICS_TEXT.encode())
    )
    after = phases.scrape("http://127.0.0.1:1/metrics")
    assert after[("Bash", "decision", "sum")] == pytest.approx(0.006)
    assert ("Bash", "decision", "bucket") not in after
    before = {("Bash", "decision", "sum"): 0.002, ("Bash", "decision", "count"): 1.0}
    means = phases.phase_means_ms(before, after, "Bash", calls=2)
    # decision: 4 ms over 2 calls; the one cold start counts for both calls, as a mean must.
    assert means == pytest.approx({"decision": 2.0, "cold_start": 250.0})
    assert phases.breakdown(means, 300.0)["outside_daemon_ms"] == pytest.approx(48.0)
    assert phases.breakdown(means, 300.0, 1.5)["outside_floor_ms"] == 1.5


COLLAPSED = """\
process 1:"python";main (a.py:1);serve (a.py:5);handle (a.py:9) 30
process 1:"python";main (a.py:1);serve (a.py:5);decide <x> (b.py:2) 45
process 1:"python";main (a.py:1);idle (a.py:7) 25
not a sample line
"""


def test_flame_graph_boxes_are_as_wide_as_their_samples() -> None:
    svg = flamegraph.render_svg(COLLAPSED, "a <test> profile")
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    boxes = {
        group.find(f"{ns}title").text.split(":")[0]: float(group.find(f"{ns}rect").get("width"))
        for group in root.iter(f"{ns}g")
    }
    assert boxes["main (a.py)"] == pytest.approx(flamegraph.WIDTH)
    assert boxes["serve (a.py)"] == pytest.approx(flamegraph.WIDTH * 0.75)
    assert boxes["decide <x> (b.py)"] == pytest.approx(flamegraph.WIDTH * 0.45)
    assert boxes["idle (a.py)"] == pytest.approx(flamegraph.WIDTH * 0.25)
    assert "a &lt;test&gt; profile (100 samples)" in svg
    # A callee sits on top of its caller: above it (smaller y), starting where it starts.
    rects = {
        g.find(f"{ns}title").text.split(":")[0]: g.find(f"{ns}rect") for g in root.iter(f"{ns}g")
    }
    assert float(rects["serve (a.py)"].get("y")) < float(rects["main (a.py)"].get("y"))


def test_flame_graph_of_nothing_is_an_empty_picture() -> None:
    root = ElementTree.fromstring(flamegraph.render_svg("", "empty"))
    assert not list(root.iter("{http://www.w3.org/2000/svg}g"))


@pytest.mark.parametrize(("chars", "met"), [(3_400, True), (30_000, True), (30_001, False)])
def test_a_kept_flood_is_judged_by_its_preview_within_the_budget(chars: int, met: bool) -> None:
    parts = parts_meeting_every_goal()
    parts["flood"].update(result_chars=chars, kept_output=True)
    metric = by_id(parts)["flood.result_chars"]
    assert metric.met is met
    assert "kept whole for Read" in metric.detail
