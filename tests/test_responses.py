"""A target's own replies as training data: batched greedy generation, storage, cropped capture."""

from __future__ import annotations

import pytest
import torch

from eaglelab.data.responses import Responses, capture_response_states, generate_responses, generate_training_data, response_rows
from eaglelab.data.tokens import encode_prompts
from eaglelab.errors import SourceError

CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_target(tiny_world):
    from eaglelab.model.targets import load_target

    model, tok = load_target(tiny_world.target_a, device="cpu")
    tok.chat_template = CHAT
    return model, tok


def test_batched_greedy_replies_equal_one_at_a_time(chat_target):
    from eaglelab.model.decoding import greedy_decode
    from eaglelab.model.targets import Target

    model, tok = chat_target
    prompts = ["a longer prompt about the bisect module and sorted lists", "alpha beta", "heapq"]
    data = generate_responses(model, tok, prompts, max_new_tokens=8, batch_size=2)
    assert data.prompts == encode_prompts(tok, prompts)  # original order, despite length-sorted batches
    assert tok.decode(data.prompts[1]).endswith("<|assistant|>")
    target = Target(model, (1, 3, 5))
    for p, r in zip(data.prompts, data.replies):
        assert 0 < len(r) <= 8
        assert r == greedy_decode(target, p, 8, eos_token_id=tok.eos_token_id).tokens  # left padding changes nothing
    target.close()


def test_replies_round_trip_and_refuse_a_bad_file(tmp_path):
    data = Responses([[1, 2, 3], [4]], [[5, 6], [7, 8, 9, 10]])
    back = Responses.load(data.save(tmp_path / "r.safetensors"))
    assert back.prompts == data.prompts and back.replies == data.replies and back.reply_tokens == 6
    (tmp_path / "bad.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(SourceError, match="not a responses file"):
        Responses.load(tmp_path / "bad.safetensors")


def test_rows_mask_the_positions_that_predict_reply_tokens():
    data = Responses([[1, 2, 3, 4], [5]], [[6, 7], [8, 9, 10]])
    ids, mask, dropped = response_rows(data, context=2)
    assert dropped == [2, 0]
    assert ids.tolist() == [[3, 4, 6, 7], [5, 8, 9, 10]]
    # position t counts when token t + 1 is a reply token
    assert mask.tolist() == [[False, True, True, False], [True, True, True, False]]


def test_cropped_capture_keeps_the_full_prompt_states(chat_target):
    from eaglelab.data.states import capture_hidden_states
    from eaglelab.model.targets import Target

    model, _ = chat_target
    g = torch.Generator().manual_seed(0)
    data = Responses([torch.randint(0, 500, (n,), generator=g).tolist() for n in (12, 5)],
                     [torch.randint(0, 500, (n,), generator=g).tolist() for n in (4, 6)])
    target = Target(model, (1, 3, 5))
    states = capture_response_states(target, data, context=3, progress=False)
    full = capture_hidden_states(target, torch.tensor([data.prompts[0] + data.replies[0]]), progress=False)
    target.close()
    assert states.input_ids.shape == (2, 9) and int(states.loss_mask.sum()) == 4 + 6
    assert torch.equal(states.input_ids[0, :7], torch.tensor(data.prompts[0][-3:] + data.replies[0]))
    # the kept window's states were computed with all 12 prompt tokens in view
    assert torch.allclose(states.aux[0, :7], full.aux[0, 9:], atol=1e-5)
    assert torch.equal(states.target_ids[0, :7], full.target_ids[0, 9:])


def test_states_recorded_while_generating_equal_a_second_pass(chat_target):
    """One pass gives replies and training states; they match capturing prompt + reply afterwards."""
    from eaglelab.model.targets import Target

    model, tok = chat_target
    prompts = ["the bisect module keeps lists sorted", "heapq", "what does functools.partial return"]
    target = Target(model, (1, 3, 5))
    data, states = generate_training_data(target, tok, prompts, max_new_tokens=6, batch_size=2, context=4)
    assert data.replies == generate_responses(model, tok, prompts, 6, batch_size=3).replies
    again = capture_response_states(target, data, context=4, progress=False)
    target.close()
    assert torch.equal(states.input_ids, again.input_ids) and torch.equal(states.loss_mask, again.loss_mask)
    m = states.loss_mask  # every position that counts has its recorded state and greedy token
    assert torch.allclose(states.aux[m], again.aux[m], atol=1e-4)
    assert torch.allclose(states.last_hidden[m], again.last_hidden[m], atol=1e-4)
    assert torch.equal(states.target_ids[m], again.target_ids[m])
