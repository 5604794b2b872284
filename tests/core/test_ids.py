from skulk_core.ids import base58btc, node_id_from_public_key, stable_reference


def test_node_id_has_libp2p_ed25519_shape() -> None:
    node_id = node_id_from_public_key(bytes(range(32)))
    assert node_id.startswith("12D3KooW")
    assert len(node_id) == 52


def test_node_id_is_a_function_of_the_key() -> None:
    a = node_id_from_public_key(b"\x01" * 32)
    assert a == node_id_from_public_key(b"\x01" * 32)
    assert a != node_id_from_public_key(b"\x02" * 32)


def _b58decode(text: str) -> bytes:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    number = 0
    for char in text:
        number = number * 58 + alphabet.index(char)
    body = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return b"\x00" * (len(text) - len(text.lstrip("1"))) + body


def test_node_id_decodes_to_identity_multihash_of_protobuf_key() -> None:
    key = bytes(range(100, 132))
    raw = _b58decode(node_id_from_public_key(key))
    # identity multihash (0x00, length 36) of protobuf PublicKey{Type=Ed25519(1), Data=key}
    assert raw == bytes([0x00, 36, 0x08, 0x01, 0x12, 0x20]) + key


def test_base58_keeps_leading_zero_bytes() -> None:
    assert base58btc(b"\x00\x00\x01") == "112"


def test_stable_reference_bounds_identifiers() -> None:
    assert stable_reference("short") == "short"
    long = "x" * 300
    ref = stable_reference(long)
    assert ref.startswith("sha256:")
    assert len(ref) == len("sha256:") + 64
