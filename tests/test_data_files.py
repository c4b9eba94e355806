"""Data as a user has it (issue #54 item 4): the picker and the loaders tell a data file's format from its head, read
JSONL conversations through the target's own chat template (rendered as transformers renders it) and plain text as
written, and refuse a binary, a ``.json`` document or a broken row in one line that says what to give.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from eaglelab.data.data_files import HEAD_BYTES, data_file
from eaglelab.data.tokens import pack_sequences, sequences_from_file
from eaglelab.errors import ParameterError, SourceError
from eaglelab.workbook.choices import check_local_paths, check_source

from .test_target_compare import fast_tokenizer

CONVERSATIONS = [
    {"id": str(i), "conversations": [{"role": "user", "content": f"how do drafts get checked, take {i}?"},
                                     {"role": "assistant", "content": "the target verifies k + 1 tokens in one pass " * 3}]}
    for i in range(24)
]


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(fast_tokenizer(tmp_path_factory.mktemp("tok") / "t")))


def test_each_format_is_named_from_its_head(tmp_path):
    write_jsonl(tmp_path / "chats.jsonl", CONVERSATIONS)
    write_jsonl(tmp_path / "texts.jsonl", [{"text": "a paragraph"}] * 3)
    write_jsonl(tmp_path / "sharegpt.jsonl", [{"conversations": [{"from": "human", "value": "hi"},
                                                                 {"from": "gpt", "value": "hello"}]}])
    (tmp_path / "notes.txt").write_text("one paragraph\n\nanother")
    assert data_file(tmp_path / "chats.jsonl").kind == "conversations"
    assert data_file(tmp_path / "sharegpt.jsonl").kind == "conversations"
    assert data_file(tmp_path / "texts.jsonl").kind == "texts" and data_file(tmp_path / "notes.txt").kind == "text"
    assert "with the target's chat template" in check_source("data", str(tmp_path / "chats.jsonl")).line
    assert "no chat template" in check_source("data", str(tmp_path / "notes.txt")).line


@pytest.mark.parametrize("name, content, says", [
    ("weights.safetensors", None, "a .safetensors file is not text the probe or the fine-tune can read: give a .jsonl"),
    ("prompts.json", json.dumps({"train": ["a"], "held_out": ["b"]}), "a .json file is one document"),
    ("export.parquet", b"PAR1\x00\x00", "a .parquet file is not text"),
    ("data.txt", b"text\x00with a NUL", "a .txt file is not text"),
    ("latin.txt", "caf\xe9 au lait".encode("latin-1"), "data is not UTF-8 text (byte 3)"),
    ("rows.jsonl", '{"text": "fine"}\n[1, 2]\n', "line 2 is not a JSON object"),
    ("rows.jsonl", '{"text": "fine"}\n{"prompt": "x"}\n', "line 2 has neither 'text' nor 'conversations'"),
    ("rows.jsonl", '{"conversations": [{"role": "user"}]}\n', "line 1: a turn without a 'role' and a text 'content'"),
    ("rows.jsonl", '{"text": \n', "line 1 is not JSON"),
    ("rows.jsonl", "\n\n", "no JSONL row in its first"),
])
def test_what_the_loaders_cannot_read_is_refused_in_one_line_everywhere(tmp_path, name, content, says):
    """The picker (no green tick), the notebooks' first check and the loader itself say the same line."""
    path = tmp_path / name
    if content is None:
        save_file({"w": torch.zeros(4)}, str(path))
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SourceError, match=rf"^{path}: ") as err:
        data_file(path)
    assert says in str(err.value) and "\n" not in str(err.value)
    check = check_source("data", str(path))
    assert not check.ok and says in check.line
    with pytest.raises(ParameterError, match=r"^DATA: ") as err:
        check_local_paths({"DATA": str(path)})
    assert says in str(err.value)


def test_conversations_go_through_the_targets_chat_template_as_transformers_renders_it(tmp_path, tokenizer):
    """The same conversations give the token stream transformers' apply_chat_template gives (held against it)."""
    write_jsonl(tmp_path / "chats.jsonl", CONVERSATIONS)
    got = sequences_from_file(tmp_path / "chats.jsonl", tokenizer, 32)
    rendered = [tokenizer.apply_chat_template(c["conversations"], tokenize=False) for c in CONVERSATIONS]
    assert rendered[0].startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>")
    assert torch.equal(got, pack_sequences(tokenizer, rendered, 32))
    bounded = sequences_from_file(tmp_path / "chats.jsonl", tokenizer, 32, max_sequences=3)
    assert torch.equal(bounded, got[:3])
    # the same rows as text: no template, the turns' words only (what a user's file gave before)
    write_jsonl(tmp_path / "texts.jsonl", [{"text": "\n".join(t["content"] for t in c["conversations"])}
                                          for c in CONVERSATIONS])
    plain = sequences_from_file(tmp_path / "texts.jsonl", tokenizer, 32)
    assert not torch.equal(plain[:3], got[:3])


def test_a_template_that_fails_on_a_row_is_named_with_the_row(tmp_path, tokenizer):
    tokenizer = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system "
                               "role') }}{% endif %}{{ m.content }}{% endfor %}")
    write_jsonl(tmp_path / "chats.jsonl", [CONVERSATIONS[0], {"conversations": [{"role": "system", "content": "x"}]}])
    with pytest.raises(SourceError, match=r"line 2: the target's chat template does not render it: the template "
                                          r"raised: .*no system role"):
        sequences_from_file(tmp_path / "chats.jsonl", tokenizer, 8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.binary(max_size=300), suffix=st.sampled_from([".jsonl", ".txt", ".json", ""]))
def test_any_file_is_a_format_or_one_line(tmp_path_factory, head, suffix):
    path = tmp_path_factory.mktemp("any") / f"data{suffix}"
    path.write_bytes(head)
    try:
        found = data_file(path)
    except SourceError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
    else:
        assert found.kind in ("conversations", "texts", "text") and found.size == len(head) <= HEAD_BYTES


def test_a_fine_tune_on_built_in_text_says_it_decides_nothing():
    """#54 item 4: notebook 04 and its panel decided "WARM START [your checkpoints]" on the text 03 gives no verdict on."""
    from types import SimpleNamespace

    from eaglelab.jobs.finetune import FinetuneReport, FinetuneSettings
    from eaglelab.recommendation import recommend

    runs = {"warm start": SimpleNamespace(metrics=[{"eval_accept_len": 1.8, "loss": 1.0}]),
            "from scratch": SimpleNamespace(metrics=[{"eval_accept_len": 1.3, "loss": 2.0}])}
    settings = FinetuneSettings("/m/new-target", old_drafter="/m/old-drafter")
    for kind, says in (("built-in", True), ("file", False), ("world-replies", False)):
        report = FinetuneReport(settings, 1.5, runs, None, f"{kind} text: 48 rows", data_kind=kind)
        report.recommendation = recommend(report.taus)
        assert report.headline().startswith("WARM START for /m/new-target from /m/old-drafter")
        assert ("on built-in text this order decides nothing for a served model: give DATA" in report.headline()) == says


# --------------------------------------------------------------------------- a conversation is one row, its reply counted

def test_a_conversation_is_one_row_counted_at_its_reply_as_transformers_renders_it(tmp_path, tokenizer):
    """#54 item 4: a user's conversations were packed into rows where the prompt and the template's markup counted
    as much as the reply; now each is the world's kind of row: prompt + last reply, counted where the next token is
    the reply's, the prompt as transformers renders it up to the assistant's turn (held against it)."""
    from eaglelab.data.conversations import conversation_responses
    from eaglelab.data.responses import response_rows
    from eaglelab.data.sets import probe_set

    chats = CONVERSATIONS[:3] + [
        {"conversations": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a"},
                           {"role": "assistant", "content": "first reply"}, {"role": "user", "content": "b"},
                           {"role": "assistant", "content": "second reply"}]},
        {"conversations": [{"role": "user", "content": "a prompt with no reply"}]},  # nothing to draft: skipped
    ]
    write_jsonl(tmp_path / "chats.jsonl", chats)
    got = conversation_responses(tmp_path / "chats.jsonl", tokenizer, seq_len=512)
    assert len(got) == 4
    for chat, prompt, reply in zip(chats, got.prompts, got.replies):
        turns_ = chat["conversations"]
        head = tokenizer.apply_chat_template(turns_[:-1], tokenize=False, add_generation_prompt=True)
        whole = tokenizer.apply_chat_template(turns_, tokenize=False)
        assert prompt == tokenizer(head, add_special_tokens=False)["input_ids"]
        assert reply == tokenizer(whole[len(head):], add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(reply).startswith(turns_[-1]["content"].strip())  # the reply (the template trims it)
    probed = probe_set(tokenizer, 8, 512, data_file=tmp_path / "chats.jsonl")
    ids, counted, _ = response_rows(got)
    assert torch.equal(probed.ids, ids) and torch.equal(probed.counted, counted)
    assert probed.positions == got.reply_tokens and "4 conversations" in str(probed.source)
    short = conversation_responses(tmp_path / "chats.jsonl", tokenizer, seq_len=16, max_rows=2)
    assert len(short) == 2 and all(len(p) + len(r) <= 16 and len(r) >= 8 for p, r in zip(short.prompts, short.replies))
    assert short.replies[0] == got.replies[0][:len(short.replies[0])]  # the reply's first tokens, the prompt's last
    assert short.prompts[0] == got.prompts[0][len(got.prompts[0]) - len(short.prompts[0]):]


def test_a_file_with_no_reply_to_draft_is_one_line(tmp_path, tokenizer):
    from eaglelab.data.conversations import conversation_responses

    write_jsonl(tmp_path / "prompts.jsonl", [{"conversations": [{"role": "user", "content": "only a question"}]}] * 3)
    with pytest.raises(SourceError, match=r"prompts\.jsonl: no conversation has an assistant turn with text"):
        conversation_responses(tmp_path / "prompts.jsonl", tokenizer, 64)
    write_jsonl(tmp_path / "mixed.jsonl", [CONVERSATIONS[0], {"text": "a text row"}])
    with pytest.raises(SourceError, match=r"mixed\.jsonl: line 2 is a text row in a file of conversations"):
        conversation_responses(tmp_path / "mixed.jsonl", tokenizer, 64)


@given(prompt=st.integers(0, 400), reply=st.integers(0, 400), seq_len=st.integers(1, 300))
def test_a_row_keeps_the_reply_first_and_never_passes_its_length(prompt, reply, seq_len):
    from eaglelab.data.conversations import _fit

    kept_p, kept_r = _fit(prompt, reply, seq_len)
    assert 0 <= kept_p <= prompt and 0 <= kept_r <= reply and kept_p + kept_r <= seq_len
    assert kept_r == min(reply, seq_len - min(prompt, seq_len // 2))  # the prompt holds at most half against a reply
    assert kept_p + kept_r == min(prompt + reply, seq_len)  # nothing of the row is left empty that could be filled
