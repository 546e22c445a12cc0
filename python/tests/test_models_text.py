# TextCodec: tokenizer and chat template of a model dir, end tokens, and the streaming decoder that
# must hold back a character split across byte-level tokens.
import json

import pytest

from hybridgen.models import ModelError
from hybridgen.models.builtin import write_builtin_model
from hybridgen.models.text import TextCodec


@pytest.fixture(scope="module")
def codec(tmp_path_factory):
    return TextCodec(write_builtin_model(tmp_path_factory.mktemp("builtin")))


def test_stream_holds_back_split_characters(codec):
    text = "né 東京!"
    ids = codec.encode(text)
    assert len(ids) == len(text.encode())  # one token per byte: é and 東 span several tokens
    stream = codec.stream()
    pieces = [stream.push(t) for t in ids]
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)
    # The second byte of é completes it: only then does it come out, whole.
    assert pieces[1] == "" and pieces[2] == "é"
    # A character that never completes comes out at the end, as the replacement character.
    stream = codec.stream()
    held = [stream.push(t) for t in codec.encode("ok 東")[:-1]]
    assert "".join(held) == "ok " and stream.flush() == "\ufffd"


def test_chat_template_and_end_tokens(codec):
    assert codec.render_chat("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert codec.render_chat("hi", system="be brief").startswith("<|im_start|>system\nbe brief<|im_end|>\n")
    ids = codec.encode_chat("hi")
    assert ids[0] == codec.tokenizer.token_to_id("<|im_start|>")
    assert codec.eos_token_ids == {codec.tokenizer.token_to_id("<|im_end|>")}
    assert codec.decode(ids) == "user\nhi\nassistant\n"  # specials skipped


def test_errors(tmp_path, codec):
    with pytest.raises(ModelError, match="no tokenizer.json"):
        TextCodec(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot load the tokenizer"):
        TextCodec(tmp_path)
    (tmp_path / "tokenizer.json").write_text(codec.tokenizer.to_str())
    with pytest.raises(ModelError, match="no chat_template"):
        TextCodec(tmp_path).render_chat("hi")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{{ raise_exception('only user turns') }}"}))
    with pytest.raises(ModelError, match="only user turns"):
        TextCodec(tmp_path).render_chat("hi")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% if %}"}))
    with pytest.raises(ModelError, match="does not render"):
        TextCodec(tmp_path).render_chat("hi")
