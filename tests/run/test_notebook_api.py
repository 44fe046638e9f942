"""The notebook API (issue 16 item 12): `gropcap.analyze(path, kernel="6.1")` takes the
CLI's options as keywords, `dir(gropcap)` lists the public API, examples name real files,
the notebook uses only the public API."""

from __future__ import annotations

import ast
import json
import os
import re

import click
import pytest
from click.testing import CliRunner

import gropcap
from gropcap.report.summary import report_dict
from gropcap.errors import ConfigError

from where import TESTS

ROOT = os.path.join(TESTS, "..")
SAMPLES = os.path.join(ROOT, "sample_pcaps")
GRE = os.path.join(SAMPLES, "crafted_gre.pcap")
REAL = os.path.join(SAMPLES, "real_ipv4.pcap")


def cli_json(*args):
    from gropcap.cli import main
    r = CliRunner().invoke(main, ["analyze", *map(str, args), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_keywords_give_the_cli_result():
    a = gropcap.analyze(GRE, kernel="6.1", queues=2, model="napi", budget=8,
                        gro_flush_timeout_us=50, poll_gap_us=20)
    assert a.config.kernel.name == "6.1" and a.config.queues == 2
    assert a.config.gro_flush_timeout_ns == 50_000 and a.config.poll_gap_ns == 20_000
    assert a.models == ["napi"]
    assert report_dict(a) == cli_json(GRE, "--kernel", "6.1", "--queues", "2", "--model", "napi",
                                   "--budget", "8", "--gro-flush-timeout-us", "50",
                                   "--poll-gap-us", "20")


def test_repeatable_flag_and_egress_keywords():
    vx = os.path.join(SAMPLES, "real_vxlan.pcap")
    a = gropcap.analyze(vx, udp_tunnel="vxlan:4789", model="ideal")
    b = gropcap.analyze(vx, udp_tunnel=["vxlan:4789"], model="ideal")
    assert a.config.udp_tunnels == b.config.udp_tunnels == (("vxlan", 4789),)
    assert report_dict(a) == cli_json(vx, "--udp-tunnel", "vxlan:4789", "--model", "ideal")
    er = os.path.join(SAMPLES, "crafted_erspan2.pcap")
    c = gropcap.analyze(er, model="napi", tunnel_gro=True, egress="decap",
                        egress_features="tso", native_gro=True)
    assert report_dict(c) == cli_json(er, "--model", "napi", "--tunnel-gro", "--egress", "decap",
                                   "--egress-features", "tso")


def test_config_object_still_works_and_clashes_are_refused():
    cfg = gropcap.GroConfig(kernel=gropcap.KernelProfile.parse("6.6"), queues=2)
    a = gropcap.analyze(GRE, cfg, models=("ideal",))
    assert a.config is cfg and a.models == ["ideal"]
    with pytest.raises(ConfigError, match="config= and the keyword"):
        gropcap.analyze(GRE, cfg, queues=4)
    with pytest.raises(ConfigError, match="models=... or model=..."):
        gropcap.analyze(GRE, models=("ideal",), model="napi")


def test_unknown_keyword_is_a_type_error_listing_the_valid_ones():
    with pytest.raises(TypeError) as e:
        gropcap.analyze(GRE, kernal="6.1")
    msg = str(e.value)
    assert msg.startswith("analyze() got unexpected keyword argument(s) 'kernal'; "
                          "option keywords: budget, captures, decoder, dsa_tag, egress, ")
    for k in ("kernel", "queues", "hz", "udp_tunnel", "gro_flush_timeout_us", "model",
              "captures"):
        assert f" {k}," in msg
    # output-only options of the command are not keywords
    with pytest.raises(TypeError, match="'out_dir'"):
        gropcap.analyze(GRE, out_dir="x")


@pytest.mark.parametrize("kw,text", [
    ({"kernel": "3.0"}, "kernel='3.0': kernel 3.0 is not modelled"),
    ({"queues": 0}, "queues=0: 0 is not in the range 1<=x<=4096."),
    ({"udp_tunnel": "bogus:1"}, "udp_tunnel='bogus:1': unknown udp tunnel kind 'bogus'"),
    ({"model": "sideways"}, "model='sideways': 'sideways' is not one of 'ideal', 'napi', "
                            "'both'."),
])
def test_bad_keyword_value_names_the_keyword(kw, text):
    with pytest.raises(ConfigError) as e:
        gropcap.analyze(GRE, **kw)
    assert e.value.one_line().startswith(text)


def test_keywords_cover_every_analyze_option():
    """Drift guard: a new `gropcap analyze` option is a keyword (a receive-configuration or
    decode option of cli.py, or one api.analyze hands on), or listed as CLI-only."""
    from gropcap import api
    from gropcap.cli import app as cli
    names = {p.name for p in cli.analyze.params}
    covered = {p.name for p in api.keyword_params().values()} | set(api.CLI_ONLY)
    assert names == covered
    assert "kernel" in gropcap.analyze_keywords()


def test_dir_lists_the_public_api():
    names = dir(gropcap)
    for name in gropcap.__all__:
        assert name in names
        assert getattr(gropcap, name) is not None
    for name in ("analyze", "load", "GroConfig", "write_analysis", "explain_flow",
                 "plot_segments", "REASONS"):
        assert name in names


def _docstrings():
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "gropcap")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                tree = ast.parse(open(path).read())
                for node in ast.walk(tree):
                    if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
                        doc = ast.get_docstring(node)
                        if doc:
                            yield path, doc


def test_docstring_examples_name_files_that_exist():
    """Regression: pipeline's example named sample_pcaps/real_ipv4_single.pcap."""
    named = {(path, m) for path, doc in _docstrings()
             for m in re.findall(r"sample_pcaps/[\w.\-]+", doc)}
    assert named, "the examples name sample captures"
    missing = [(p, m) for p, m in named if not os.path.exists(os.path.join(ROOT, m))]
    assert missing == []


def _notebook_code():
    nb = json.load(open(os.path.join(ROOT, "docs", "example.ipynb")))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def test_notebook_uses_only_the_public_api():
    code = "\n".join(line for line in _notebook_code().splitlines()
                     if not line.startswith("%"))
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("gropcap"), ast.unparse(node)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "gropcap":
            assert node.attr in gropcap.__all__, node.attr
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            assert not (name.startswith("_") and not name.startswith("__")), name


def test_readme_points_to_the_notebook():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "docs/example.ipynb" in readme
    assert 'gropcap.analyze("sample_pcaps/real_ipv4.pcap", kernel="6.1"' in readme


def test_cli_only_options_are_real_options():
    from gropcap import api
    from gropcap.cli import app as cli
    params = {p.name: p for p in cli.analyze.params}
    for name in api.CLI_ONLY:
        assert name in params
        assert name == "files" or isinstance(params[name], click.Option)


def test_keywords_leave_the_cli_help_option_alone():
    """Regression: the keyword conversion made a bare click context for `analyze`, click
    cached its help option from it, and `gropcap analyze -h` then failed in that process."""
    from gropcap.cli import main
    gropcap.analyze(GRE, kernel="6.1", model="ideal")
    r = CliRunner().invoke(main, ["analyze", "-h"])
    assert r.exit_code == 0 and "-h, --help" in r.stdout
