"""tests/hf/generate.py: meshmoe's greedy sample against transformers' greedy decoding of the
same model, exported with `./train export-hf`.

    generate.py HF_DIR PROMPT_IDS TEXT

PROMPT_IDS: the prompt's token ids, comma-separated; TEXT: the file holding the line meshmoe's
sample printed after its header (`decode_sampling_strategy=greedy`: the prompt, then the
tokens it chose, bytes printed as trainer/sample.c prints them). This script only runs HF's
model (its largest logit at each step, the whole sequence so far as the context) and prints
its tokens the same way; it computes nothing on meshmoe's side.

Passes when the two texts are the same, or when the first token where they part is a near
tie in HF's logits (its two largest within NEAR) after at least 8 equal tokens: the logits
of the two programs agree within about 5e-6 (tests/hf/check.py), so a tie closer than that
may go either way, and after it the two texts are different sequences.
"""
import sys

import torch
from transformers import AutoModelForCausalLM

NEAR = 1e-4   # 20 times the largest logit difference measured between the two (check.py: 4.8e-6)


def printed(tok):
    """A token as trainer/sample.c prints it with a vocabulary of 256 bytes."""
    if tok in (10, 9) or 32 <= tok < 127:
        return chr(tok)
    return f"\\x{tok:02x}"


def main():
    hf_dir, prompt, text_path = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3]
    theirs = open(text_path, encoding="latin-1").read()[:-1]   # (the newline before the sample's "----")
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    ids, gaps = list(prompt), []
    mine = "".join(printed(t) for t in prompt)
    with torch.no_grad():
        while len(mine) < len(theirs):
            z = model(torch.tensor([ids])).logits[0, -1]
            top2 = torch.topk(z, 2).values
            gaps.append(float(top2[0] - top2[1]))
            ids.append(int(torch.argmax(z)))
            mine += printed(ids[-1])
    n = len(ids) - len(prompt)
    if mine == theirs:
        print(f"  ok   greedy: {n} tokens as transformers chose them (its smallest gap between the two "
              f"largest logits {min(gaps):.2e}): {mine[:60]!r}")
        print("1 passed, 0 failed")
        return
    # The first token whose printed form differs.
    at, shown = n - 1, "".join(printed(t) for t in prompt)
    for k, tok in enumerate(ids[len(prompt):]):
        if not theirs.startswith(shown + printed(tok)):
            at = k
            break
        shown += printed(tok)
    tie = gaps[at] < NEAR and at >= 8
    print(f"  {'ok' if tie else 'FAIL'}   greedy: the texts part at generated token {at} of {n}, where transformers' "
          f"two largest logits are {gaps[at]:.2e} apart ({'a near tie' if tie else 'not a tie'}):\n"
          f"       transformers {mine[:80]!r}\n       meshmoe      {theirs[:80]!r}")
    print("1 passed, 0 failed" if tie else "0 passed, 1 failed")


if __name__ == "__main__":
    main()
