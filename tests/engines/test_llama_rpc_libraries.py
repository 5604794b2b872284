"""The RPC pool binds the ggml libraries libllama itself mapped, never a second copy:
a second ggml-rpc registry made llama.cpp turn flash attention off in every pool."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from skulk_daemon.engines._llama_model import LlamaCppSettings, LlamaModel, set_llama_logging
from skulk_daemon.engines.llama_rpc import RpcOffload, mapped_library
from tests.daemon_process import free_port

MAPS = (
    "7e00-7e01 r-xp 00000000 08:01 10 /other/pkg/libggml.so\n"
    "7f00-7f01 r-xp 00000000 08:01 11 /opt/lib/libllama.so.0\n"
    "7f01-7f02 r-xp 00000000 08:01 12 /opt/lib/libggml-rpc.so.0\n"
    "7f02-7f03 r-xp 00000000 08:01 13 /opt/lib/libggml.so.0\n"
    "7f03-7f04 rw-p 00000000 00:00 0 \n"
)


def test_the_file_libllama_mapped_is_chosen_not_the_unversioned_one() -> None:
    assert mapped_library("libggml", MAPS) == Path("/opt/lib/libggml.so.0")
    assert mapped_library("libggml-rpc", MAPS) == Path("/opt/lib/libggml-rpc.so.0")


def test_without_a_mapping_the_unversioned_file_beside_llama_cpp_is_used() -> None:
    chosen = mapped_library("libggml-rpc", "")
    assert chosen.name == "libggml-rpc.so"
    assert chosen.parent == Path(llama_cpp.__file__).parent / "lib"


def test_in_this_process_it_is_the_copy_libllama_loaded() -> None:
    chosen = mapped_library("libggml-rpc")
    assert chosen.name != "libggml-rpc.so"  # libllama needs the versioned soname
    assert chosen.exists()


@pytest.fixture
def donor() -> Iterator[str]:
    """Skulk's own RPC server (``serve_rpc``) in a process of its own."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    code = (
        "import sys; from skulk_daemon.engines.llama_rpc import serve_rpc; "
        "serve_rpc(sys.argv[1], 1)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, endpoint],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the RPC donor exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the RPC donor never listened"
                time.sleep(0.05)
        yield endpoint
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_a_pooled_model_keeps_flash_attention(
    demo_gguf: Path, donor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = LlamaCppSettings(
        demo_gguf,
        context_tokens=256,
        slots=1,
        n_threads=1,
        offload=RpcOffload(endpoints=(donor,), layers=(9,)),
    )
    set_llama_logging(verbose=True)
    try:
        model = LlamaModel.open(settings)
        model.close()
    finally:
        set_llama_logging(verbose=False)
    log = capsys.readouterr().err
    assert "Flash Attention enabled" in log
    assert "Flash Attention not supported" not in log
