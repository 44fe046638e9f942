"""--poll-acks on the Dask core per partition (issue 15: every feature in distributed
mode): one task makes the pass over the whole capture that finds the polls the
receiver's ACKs close and writes the retimed arrivals to the scratch directory
(``run.dask_tasks.ack_task``); each GRO task's napi model reads its rows' arrivals
there. Summary, flows and Parquet rows equal the one-process bounded run's, whichever
way the partitions get their rows (fused, exchanged, one task per receiver run)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("distributed", reason="dask[distributed] not installed")

from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.run.dask_core import analyze_partitioned  # noqa: E402
from gropcap.run.memory import analyze  # noqa: E402
from gropcap.run.stream import stream_analyze  # noqa: E402

from tests.run.test_runner import _no_fallback, assert_same_rows, client  # noqa: E402,F401
from where import ROOT  # noqa: E402

S = os.path.join(ROOT, "sample_pcaps")
IPV4, IPV6, P4 = (os.path.join(S, n) for n in ("real_ipv4.pcap", "real_ipv6.pcap",
                                                "real_ipv4_p4.pcap"))


@pytest.mark.parametrize("exchange,paths,config", [
    ("fused", [IPV4], GroConfig(poll_acks=True, queues=2)),
    ("exchange", [IPV4, IPV6], GroConfig(poll_acks=True, queues=2, budget=8)),
    # copies as separate receivers: a task per run, each numbering its rows from 0
    ("runs", [IPV6, IPV4, IPV6], GroConfig(poll_acks=True)),
    ("runs", [P4, IPV4], GroConfig(poll_acks=True, queues=2, poll_gap_ns=5_000,
                                   gro_flush_timeout_ns=20_000, napi_defer_hard_irqs=1)),
], ids=["fused", "exchange", "runs-copies", "runs-timers"])
def test_poll_acks_per_partition_equals_one_process(client, tmp_path, exchange,  # noqa: F811
                                                    paths, config):
    captures = "separate" if exchange == "runs" else "continuous"
    one = stream_analyze(paths, config, out_dir=str(tmp_path / "one"), captures=captures)
    assert one.summary == analyze(paths, config, captures=captures).summary()
    dist = analyze_partitioned(paths, config, client=client, exchange=exchange,
                               out_dir=str(tmp_path / "dist"), fallback=_no_fallback,
                               captures=captures)
    assert dist.exchange == exchange
    assert dist.summary == one.summary
    assert dist.flows.equals(one.flows)
    assert_same_rows(tmp_path / "one", tmp_path / "dist")
    # the ACKs decided polls: without them the napi model's polls differ
    plain = stream_analyze(paths, config.replace(poll_acks=False), captures=captures)
    assert plain.summary["models"]["napi"] != dist.summary["models"]["napi"]
    # the ACK pass's files went with the scratch directory
    assert not any(n.startswith(".gropcap") for n in os.listdir(tmp_path / "dist"))


def test_summary_only(client, tmp_path):  # noqa: F811
    config = GroConfig(poll_acks=True, queues=2)
    one = stream_analyze([IPV4, IPV6], config, captures="continuous")
    dist = analyze_partitioned([IPV4, IPV6], config, client=client, fallback=_no_fallback,
                               captures="continuous")
    assert dist.summary == one.summary


def test_the_cli_runs_poll_acks_on_workers(tmp_path):
    """``--parallel workers`` (and ``--scheduler``) run --poll-acks on the core per
    partition now; the JSON is the one-process run's."""
    from click.testing import CliRunner
    from gropcap.cli import main
    args = ["analyze", IPV4, "--poll-acks", "--queues", "2", "--format", "json", "-q"]
    one = CliRunner().invoke(main, args)
    assert one.exit_code == 0, one.output
    dist = CliRunner().invoke(main, args + ["--jobs", "2", "--parallel", "workers"])
    assert dist.exit_code == 0, dist.output
    assert json.loads(dist.stdout) == json.loads(one.stdout)
