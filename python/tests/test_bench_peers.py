# The peer comparisons of the benchmarks (bench/cpu_attention/peers.py, bench/models/
# llama_bench_peer.py): ratios against the roof of the same round, medians over rounds, a missing
# peer skipped with a notice, llama-bench's rows joined to hybridgen's. The peers themselves live
# outside the repository; these tests stand in small fake programs for them and for the bench.
import csv
import importlib.util
import os
import pathlib
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEERS = ROOT / "bench" / "cpu_attention" / "peers.py"
LLAMA = ROOT / "bench" / "models" / "llama_bench_peer.py"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def peers():
    return load(PEERS, "peers")


@pytest.fixture(scope="module")
def llama():
    return load(LLAMA, "llama_bench_peer")


def test_ratios_are_to_the_roof_of_their_own_round(peers):
    case = ("bf16", 65536, 1, 2)
    # The roof moves between rounds (a neighbour's burst): each peer/roof pairs the peer with the
    # roof hybridgen measured in that round, not with the median roof.
    results = {"hybridgen": {case: [(4.0, 5.0), (9.0, 10.0), (2.0, 20.0)]},
               "ggml": {case: [(1.0, 5.0), (3.0, 10.0), (1.0, 20.0)]},
               "torch": {}}
    [row] = peers.summarize(results, {"date": "d"})
    assert row["roof_gbps"] == 10.0
    # Per round 0.8, 0.9, 0.1 and 0.2, 0.3, 0.05 (median GB/s over median roof: 0.4 and 0.1).
    assert row["hybridgen_roof"] == pytest.approx(0.8)
    assert row["ggml_roof"] == pytest.approx(0.2)
    assert row["hybridgen_gbps"] == 4.0 and row["ggml_gbps"] == 1.0
    assert row["hybridgen_over_ggml"] == pytest.approx(4.0)
    assert row["torch_gbps"] is None and row["hybridgen_over_torch"] is None
    assert (row["dtype"], row["context"], row["batch"], row["threads"]) == case


def test_missing_peers_are_skipped_with_one_line_each(peers, tmp_path, capsys):
    assert peers.available_peers(tmp_path) == {}
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("peers: ggml skipped") and "scripts/peers.sh ggml`" in lines[0]
    assert lines[1].startswith("peers: torch skipped") and "scripts/peers.sh torch" in lines[1]
    assert peers.available_peers(tmp_path, avx2=True) == {}
    assert "scripts/peers.sh ggml-avx2`" in capsys.readouterr().out


def write_script(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


# A stand-in for hybridgen_cpu_attention_bench / ggml_flash_attn: one CSV row per context of its
# --contexts at the --dtypes it is given, with a speed it takes from its environment.
FAKE = """#!{python}
import os, sys
a = dict(x[2:].split("=", 1) for x in sys.argv[1:] if "=" in x)
roof = {with_roof}
print("context,batch,dtype,threads,kv_bytes,seconds,gbps" + (",roof_gbps,ratio" if roof else ""))
g = float(os.environ["{var}"])
for c in a["contexts"].split(","):
    print(f"{{c}},1,{{a['dtypes']}},1,100,1,{{g}}" + (",10,0" if roof else ""))
"""


def test_one_run_interleaves_hybridgen_and_a_peer(tmp_path):
    build, peer_dir = tmp_path / "build", tmp_path / "peers"
    write_script(build / "bin" / "hybridgen_cpu_attention_bench",
                 FAKE.format(python=sys.executable, with_roof=True, var="FAKE_HG"))
    write_script(peer_dir / "bin" / "ggml_flash_attn",
                 FAKE.format(python=sys.executable, with_roof=False, var="FAKE_GGML"))
    out = tmp_path / "peers.csv"
    env = dict(os.environ, HYBRIDGEN_PEERS_DIR=str(peer_dir), FAKE_HG="8", FAKE_GGML="2")
    proc = subprocess.run(
        [sys.executable, str(PEERS), f"--build-dir={build}", "--contexts=16384,65536",
         "--dtypes=f32,bf16", "--threads=1", "--batches=1", "--rounds=2", f"--out={out}"],
        capture_output=True, text=True, env=env, check=True)
    assert "peers: torch skipped" in proc.stdout
    rows = list(csv.DictReader(out.open()))
    assert [(r["dtype"], r["context"]) for r in rows] == [
        ("bf16", "16384"), ("bf16", "65536"), ("f32", "16384"), ("f32", "65536")]
    for r in rows:
        assert float(r["hybridgen_roof"]) == pytest.approx(0.8)
        assert float(r["ggml_roof"]) == pytest.approx(0.2)
        assert float(r["hybridgen_over_ggml"]) == pytest.approx(4.0)
        assert r["torch_gbps"] == "" and r["cpu_model"] and r["date"]
    assert "hybridgen / better peer at >= 16K tokens: min 4.00" in proc.stdout


# A stand-in that reports the --cold-bytes it was given as its speed.
COLD = """#!{python}
import sys
a = dict(x[2:].split("=", 1) for x in sys.argv[1:] if "=" in x)
print("context,batch,dtype,threads,kv_bytes,seconds,gbps" + (",roof_gbps,ratio" if {with_roof} else ""))
print(f"16384,1,{{a['dtypes']}},1,100,1,{{a['cold-bytes']}}" + (",1000,0" if {with_roof} else ""))
"""


@pytest.mark.parametrize("flag,expected", [("--cold-bytes=300", 300), ("--cold-bytes=0", 0)])
def test_every_program_reads_its_kv_as_cold_as_hybridgen(tmp_path, flag, expected):
    # The same --cold-bytes reaches hybridgen's bench and the peer, or the peer would read from
    # the L3 what hybridgen reads from DRAM.
    build, peer_dir = tmp_path / "build", tmp_path / "peers"
    write_script(build / "bin" / "hybridgen_cpu_attention_bench",
                 COLD.format(python=sys.executable, with_roof=True))
    write_script(peer_dir / "bin" / "ggml_flash_attn",
                 COLD.format(python=sys.executable, with_roof=False))
    out = tmp_path / "peers.csv"
    env = dict(os.environ, HYBRIDGEN_PEERS_DIR=str(peer_dir))
    subprocess.run([sys.executable, str(PEERS), f"--build-dir={build}", "--contexts=16384",
                    "--dtypes=bf16", "--threads=1", "--batches=1", "--rounds=1", flag,
                    f"--out={out}"], capture_output=True, text=True, env=env, check=True)
    (row,) = list(csv.DictReader(out.open()))
    assert float(row["hybridgen_gbps"]) == expected and float(row["ggml_gbps"]) == expected


def test_cold_bytes_default_to_twice_the_l3(peers):
    l3 = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True,
                        text=True).stdout.strip()
    want = 2 * int(l3) if l3 and int(l3) > 0 else 64 << 20
    assert peers.default_cold_bytes() == want


def test_torch_peer_keeps_enough_kv_copies_within_the_budget():
    torch_sdpa = load(ROOT / "bench" / "cpu_attention" / "peers" / "torch_sdpa.py", "torch_sdpa")
    assert torch_sdpa.cold_copies(100, 0, 10_000) == 1  # off
    assert torch_sdpa.cold_copies(100, 250, 10_000) == 3  # 300 bytes between two reads of one
    assert torch_sdpa.cold_copies(100, 100, 10_000) == 1  # one copy is already cold enough
    assert torch_sdpa.cold_copies(100, 250, 250) == 2  # only two fit the budget
    assert torch_sdpa.cold_copies(100, 250, 50) == 1  # never fewer than one


def test_llama_bench_rows_join_hybridgens_with_bytes_per_token(llama):
    decode = [{"n_depth": 1024, "n_threads": 1, "avg_ts": 100.0, "model_size": 90_000_000,
               "model_type": "llama ?B Q4_1"},
              {"n_depth": 1024, "n_threads": 2, "avg_ts": 150.0, "model_size": 90_000_000}]
    prefill = [{"n_prompt": 512, "n_threads": 1, "avg_ts": 900.0, "model_size": 90_000_000}]
    hybrid = {("decode", 1024, 1): {"tokens_per_s": "50", "bytes_per_step": "290000000"},
              ("prefill", 512, 1): {"tokens_per_s": "300", "bytes_per_step": ""}}
    rows = llama.join(decode, prefill, hybrid, kv_bytes_per_token=1000, kv="f16")
    assert {r["kv"] for r in rows} == {"f16"}
    assert [(r["phase"], r["context"], r["threads"]) for r in rows] == [
        ("decode", 1024, 1), ("decode", 1024, 2), ("prefill", 512, 1)]
    d1, d2, p1 = rows
    assert d1["llama_bytes_per_token"] == 90_000_000 + 1000 * 1024
    assert d1["hybridgen_bytes_per_token"] == 290e6
    assert d1["hybridgen_over_llama"] == pytest.approx(0.5)
    assert d2["hybridgen_tokens_per_s"] is None and d2["hybridgen_over_llama"] is None
    assert p1["llama_bytes_per_token"] is None and p1["hybridgen_bytes_per_token"] is None
    assert p1["hybridgen_over_llama"] == pytest.approx(1 / 3)


def test_bf16_copy_of_a_quantized_gguf(tmp_path):
    # A small GGUF as llama.cpp's quantizer writes one: metadata, an f32 norm, a Q4_1 matrix.
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    src, dst = tmp_path / "q.gguf", tmp_path / "bf16.gguf"
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 64)).astype(np.float32)
    norm = rng.standard_normal(64).astype(np.float32)
    writer = gguf.GGUFWriter(src, "llama")
    writer.add_uint32("llama.block_count", 3)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_1))
    writer.add_tensor("output_norm.weight", norm)
    q4 = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q4_1)
    writer.add_tensor("blk.0.attn_q.weight", q4, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    subprocess.run([sys.executable, str(ROOT / "bench" / "models" / "bf16_gguf.py"), str(src),
                    str(dst)], check=True, capture_output=True)
    reader = gguf.GGUFReader(dst)
    assert reader.get_field("llama.block_count").contents() == 3
    assert reader.get_field("general.file_type").contents() == int(gguf.LlamaFileType.MOSTLY_BF16)
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["output_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    np.testing.assert_array_equal(np.asarray(tensors["output_norm.weight"].data), norm)
    q = tensors["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.BF16
    got = gguf.quants.dequantize(q.data, q.tensor_type)
    want = gguf.quants.dequantize(q4, gguf.GGMLQuantizationType.Q4_1)  # the Q4_1 values, not the
    assert got.shape == weight.shape                                   # originals, survive
    np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=1e-6)
    assert not dst.with_name(dst.name + ".tmp").exists()
