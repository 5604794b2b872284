"""The RPC pool binds the ggml libraries libllama itself mapped, never a second copy
(a second ggml-rpc registry made llama.cpp turn flash attention off in every pool)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from skulk_daemon.engines.llama_rpc import mapped_library

MAPS = (
    "7f00-7f01 r-xp 00000000 08:01 11 /opt/lib/libggml-base.so.0\n"
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
