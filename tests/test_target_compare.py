"""``eaglelab compare-targets``: tokenizers read and chat templates rendered without transformers, checked against it.

The readers and the renderer are eaglelab's own (metadata commands import no transformers); the oracle is
transformers itself on the same files: its ``PreTrainedTokenizerFast`` for the ids, its
``apply_chat_template`` for the renderings (a property test over conversations). Then the verdicts
(another vocabulary, another template, the same), hub ids through the hub-compatible server, and hostile
files (one line, or a finding for a template that does not render).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.targets.chat_templates import SAMPLE_CONVERSATION, render
from eaglelab.checkpoints.targets.compare import compare_tokenizers
from eaglelab.checkpoints.targets.tokenizer_files import read_target_files, read_tokenizer
from eaglelab.cli import main
from eaglelab.errors import SourceError
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets
from eaglelab.worlds.kimi_shapes import K2_TEMPLATE, K25_TEMPLATE, tokenizer_files

TEXT = ["the drafter reads three layers of the target", "speculative decoding drafts tokens and checks them",
        "def main():\n    return 0\n", "a chat template shapes every prompt the drafter meets"] * 8
#: A Llama-3-style template (system / user / assistant headers), as in transformers' tests.
LLAMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                  "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
TEMPLATES = {"llama": LLAMA_TEMPLATE, "k2": K2_TEMPLATE, "k25": K25_TEMPLATE,
             "tojson": "{% for m in messages %}{{ m | tojson }}\n{% endfor %}",
             "loop controls": "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.role }} {% endfor %}"}


def fast_tokenizer(folder: Path, vocab_size: int = 300, template: str | None = LLAMA_TEMPLATE, text=TEXT):
    """A real byte-level BPE tokenizer (``tokenizers``), saved by transformers as a model folder's files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|begin_of_text|>", "<|eot_id|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    if template is not None:
        fast.chat_template = template
    fast.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "hidden_size": 64, "num_hidden_layers": 8, "vocab_size": vocab_size,
                                                    "num_attention_heads": 4, "intermediate_size": 128}))
    return folder


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return fast_tokenizer(tmp_path_factory.mktemp("tok") / "target")


def test_the_vocabulary_is_read_as_transformers_reads_it(target):
    from transformers import AutoTokenizer

    ours = read_tokenizer(read_target_files(str(target)))
    theirs = AutoTokenizer.from_pretrained(target)
    assert ours.kind == "tokenizer.json" and ours.size == len(theirs)
    assert {i: ours.token(i) for i in range(len(theirs))} == {i: t for t, i in theirs.get_vocab().items()}
    assert ours.specials["bos_token"] == theirs.bos_token and ours.specials["eos_token"] == theirs.eos_token
    assert ours.templates["default"] == theirs.chat_template and ours.template_file == "chat_template.jinja"


@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_render_as_transformers_renders_them(name, tmp_path):
    from transformers import AutoTokenizer

    folder = fast_tokenizer(tmp_path / name, template=TEMPLATES[name])
    ours = read_tokenizer(read_target_files(str(folder)))
    want = AutoTokenizer.from_pretrained(folder).apply_chat_template(list(SAMPLE_CONVERSATION), tokenize=False,
                                                                     add_generation_prompt=True)
    got = render(ours.templates["default"], SAMPLE_CONVERSATION, ours.specials)
    assert got.problem is None and got.text == want


_TOKENIZERS: dict = {}


def _tokenizer_of(folder):
    from transformers import AutoTokenizer

    if folder not in _TOKENIZERS:
        _TOKENIZERS[folder] = AutoTokenizer.from_pretrained(folder)
    return _TOKENIZERS[folder]


CONTENT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), CONTENT), min_size=1, max_size=5),
       generation=st.booleans(), name=st.sampled_from(sorted(TEMPLATES)))
def test_any_conversation_renders_as_transformers_renders_it(target, turns, generation, name):
    tok = _tokenizer_of(target)
    messages = [{"role": r, "content": c} for r, c in turns]
    want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation,
                                   chat_template=TEMPLATES[name])
    assert render(TEMPLATES[name], messages, {"bos_token": tok.bos_token, "eos_token": tok.eos_token},
                  add_generation_prompt=generation).text == want


def test_another_vocabulary_invalidates_the_drafter(target, tmp_path):
    other = fast_tokenizer(tmp_path / "other", text=[t.upper() for t in TEXT])
    old, new = (read_tokenizer(read_target_files(str(p))) for p in (target, other))
    bytes_only = compare_tokenizers(old, new, drafter_ids=range(258))  # the byte alphabet and the specials
    assert bytes_only.drafter_renamed == 0 and bytes_only.drafter_safe
    cmp_ = compare_tokenizers(old, new, drafter_ids=range(300))  # and the merges, learned from other text
    assert not cmp_.same_vocabulary and cmp_.renamed == cmp_.drafter_renamed > 0 and not cmp_.drafter_safe
    report = compare_targets(TargetCompareSettings(str(target), str(other)))
    assert report.verdict.level == "new vocabulary" and report.verdict.line.startswith("ANOTHER TOKENIZER")
    assert report.templates.same_text  # the same template: the tokenizer is what moved


def test_added_special_tokens_alone_leave_the_drafter_ids(target, tmp_path):
    from transformers import AutoTokenizer

    grown = tmp_path / "grown"
    tok = AutoTokenizer.from_pretrained(target)
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    tok.save_pretrained(grown)
    (grown / "config.json").write_text((target / "config.json").read_text())
    report = compare_targets(TargetCompareSettings(str(target), str(grown)))
    t = report.tokenizers
    assert t.same_vocabulary and t.only_new == 2 and t.renamed == 0 and not t.same and t.drafter_safe
    assert any("<think>" in line for line in t.special_changes)
    assert report.verdict.level == "probe"


def test_a_template_that_does_not_render_is_a_finding(target, tmp_path, capsys):
    broken = fast_tokenizer(tmp_path / "broken", template="{{ raise_exception('system role first') }}")
    loop = fast_tokenizer(tmp_path / "loop", template="{% for i in range(99999) %}{% for j in range(99999) %}"
                                                       "{% endfor %}{% endfor %}")
    for folder, why in ((broken, "the template raised: 'system role first'"), (loop, "took longer than")):
        assert main(["compare-targets", str(target), str(folder), "--json"]) == 0
        js = json.loads(capsys.readouterr().out)
        assert why in js["templates"]["problems"][1] and js["verdict"]["level"] == "re-template"


@pytest.mark.parametrize("name, content, problem", [
    ("tokenizer.json", b'{"model": {"vocab": {"a": "1"}}}', "must be a token id"),
    ("tokenizer.json", b'{"model": {"vocab": {"a": -1}}}', "must be a token id"),
    ("tokenizer.json", b"[]", "expected a JSON object"),
    ("tokenizer.json", b'{"model": {"vocab": {}, "merges": [1]}}', "model.merges[0]"),
    ("tiktoken.model", b"YQ== 0\nnot base64! 1\n", "line 2"),
    ("tiktoken.model", b"YQ== -1\n", "line 1"),
    ("tokenizer_config.json", b'{"added_tokens_decoder": {"x": {"content": "a"}}}', "is not a token id"),
    ("tokenizer_config.json", b'{"chat_template": 3}', "chat_template must be"),
    ("tokenizer_config.json", b'{"eos_token": 3}', "eos_token must be"),
    ("chat_template.jinja", b"\xff\xfe{{ x }}", "not valid UTF-8"),
    ("generation_config.json", b'{"eos_token_id": "2"}', "eos_token_id"),
])
def test_a_file_that_is_not_what_its_name_says_is_one_line(target, tmp_path, capsys, name, content, problem):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(target, bad)
    if name == "tiktoken.model":
        (bad / "tokenizer.json").unlink()
    (bad / name).write_bytes(content)
    assert main(["compare-targets", str(target), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and problem in err, err


def test_files_over_their_cap_are_refused_before_they_are_read(target, tmp_path):
    import shutil

    from eaglelab.checkpoints.targets import tokenizer_files

    big = tmp_path / "big"
    shutil.copytree(target, big)
    with open(big / "chat_template.jinja", "wb") as fh:
        fh.truncate(tokenizer_files.MAX_TEMPLATE_BYTES + 1)  # sparse: the cap, not the disk, refuses it
    with pytest.raises(SourceError, match="over the"):
        read_target_files(str(big))


def test_compare_targets_of_hub_ids(tmp_path, monkeypatch, capsys):
    """Two repos on the hub-compatible server: configs and tokenizer files by name, each under the deadline."""
    from tests.hub_server import HubServer, point_client_at

    with HubServer(tmp_path / "hub") as hub:
        point_client_at(monkeypatch, hub.endpoint, tmp_path / "hf-home")
        for repo, template in (("moonshot/k2-like", K2_TEMPLATE), ("moonshot/k25-like", K25_TEMPLATE)):
            folder = hub.revision_dir(repo)
            for name, text in tokenizer_files(template).items():
                (folder / name).write_text(text)
            (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"],
                                                            "hidden_size": 64, "num_hidden_layers": 4,
                                                            "vocab_size": 163840}))
        assert main(["compare-targets", "moonshot/k2-like", "moonshot/k25-like", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["tokenizers"]["same"] is True and report["verdict"]["level"] == "re-template"
        assert report["a"]["tokenizer"]["kind"] == "tiktoken.model"
        assert main(["compare-targets", "moonshot/k2-like", "moonshot/missing"]) == 2
        assert "moonshot/missing" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["compare-targets", "moonshot/k2-like", "moonshot/k25-like"]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err


def test_compare_targets_imports_neither_torch_nor_transformers(target, tmp_path):
    import subprocess
    import sys

    code = ("import sys; from eaglelab.cli import main; rc = main(['compare-targets', sys.argv[1], sys.argv[1]]); "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(rc, bad)")
    out = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True).stdout
    assert out.strip().endswith("0 []"), out
