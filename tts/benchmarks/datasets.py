"""Benchmark datasets: MATH-500, AIME 2024/2025, AMC 2023, GSM8K, and any JSONL/Parquet/HF dataset.

The normal path loads from the Hugging Face hub through ``datasets``; ``--data PATH`` overrides it
with a local JSONL file, Parquet file or a directory saved by ``datasets.save_to_disk``. A row that
is not valid JSON or lacks a field is refused with its file, line and the flag that fixes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from tts.prompts import MATH_PROMPT, PromptTemplate
from tts.types import Problem

logger = logging.getLogger(__name__)


class DatasetError(ValueError):
    """A dataset file or row that cannot be used; the message names the file, line and fix."""


def _pick(row: dict[str, Any], names: Sequence[str]) -> str | None:
    for name in names:
        if name in row and row[name] is not None:
            return name
    return None


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a JSONL file (gzipped when its name ends in ``.gz``) with their 1-based line numbers;
    blank lines are skipped."""
    import gzip

    rows = []
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{path}, line {lineno}: not valid JSON ({exc.msg} at column {exc.colno}). "
                    "Each line must be one JSON object; fix or remove that line."
                ) from exc
            if not isinstance(row, dict):
                raise DatasetError(f"{path}, line {lineno}: expected a JSON object, got {type(row).__name__}.")
            rows.append((lineno, row))
    return rows


class Benchmark:
    """A named set of problems with a default prompt and known field names.

    Subclasses set the hub location and field names; :meth:`load` does the rest.
    """

    name: ClassVar[str] = "jsonl"
    hub_id: ClassVar[str | None] = None
    hub_config: ClassVar[str | None] = None
    hub_split: ClassVar[str] = "test"
    id_fields: ClassVar[tuple[str, ...]] = ("id", "unique_id", "problem_id")
    question_fields: ClassVar[tuple[str, ...]] = ("problem", "question", "prompt")
    answer_fields: ClassVar[tuple[str, ...]] = ("answer", "expected_answer", "gold")
    prompt: ClassVar[PromptTemplate] = MATH_PROMPT
    option_names: ClassVar[tuple[str, ...]] = ()
    """Options a generated benchmark takes (``data.options``); files and hub sets take none."""

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse options this benchmark does not take, naming the ones it does."""
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            takes = f"it takes: {', '.join(self.option_names)}" if self.option_names else "it takes none"
            raise DatasetError(f"the {self.name} benchmark has no option {', '.join(unknown)}; {takes}.")

    def configure(self, options: dict[str, Any]) -> None:
        """Take the options that say how answers are graded (not which problems load), refusing
        unknown ones. :meth:`load` calls it; so does the eval runner when the caller loaded the
        problems already, so that the benchmark object that grades sees every option."""
        self.check_options(options)

    @property
    def needs_sandbox(self) -> bool:
        """Whether grading runs model-written code in the sandbox (bubblewrap must be installed)."""
        return False

    def grader(self, timeout: int) -> Any:
        """The grader of this benchmark's answers (a context manager with ``grade_problems``):
        math-verify OR a normalised string match against the gold answer, ``timeout`` seconds per check."""
        from tts.benchmarks.grading import Grader

        return Grader(timeout=timeout)

    def clean_answer(self, raw: Any) -> str:
        """Gold answer as a string (GSM8K overrides this to take the number after ####)."""
        return str(raw).strip()

    def _rows(self, path: Path | None) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
        if path is None:
            if self.hub_id is None:
                raise DatasetError(
                    f"Benchmark {self.name!r} has no hub copy; pass --data PATH (JSONL, Parquet or a "
                    "saved HF dataset directory)."
                )
            return self.hub_id, self._hub_rows(self.hub_id)
        path = Path(path)
        if not path.exists():
            raise DatasetError(
                f"Data file {path} does not exist. Check the path given to --data (relative paths "
                f"are taken from {Path.cwd()})."
            )
        if path.is_dir():
            from datasets import load_from_disk

            ds = load_from_disk(str(path))
            if hasattr(ds, "keys"):  # a DatasetDict: take the test split, else the first
                ds = ds["test"] if "test" in ds else ds[next(iter(ds.keys()))]
            return str(path), [(i + 1, dict(r)) for i, r in enumerate(ds)]
        if path.suffix == ".parquet":
            from datasets import Dataset

            ds = Dataset.from_parquet(str(path))
            return str(path), [(i + 1, dict(r)) for i, r in enumerate(ds)]
        if path.suffix in (".jsonl", ".json", ".ndjson"):
            return str(path), read_jsonl(path)
        raise DatasetError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl or .parquet.")

    def _hub_rows(self, hub_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The rows of the hub copy (numbered from 1), or one sentence saying why there are none.

        1. Ask the hub once, quickly (:func:`tts.hub.why_unreachable`): unreachable, its cached
           copy is read without a request (no retries), with a warning saying so (offline mode,
           chosen by the user, is said at INFO).
        2. Load quietly: the hub libraries' retry warnings stay off the terminal.
        3. A copy that can be neither downloaded nor read from the cache, or a dataset the hub
           refuses, is a :class:`DatasetError` naming the dataset, the cause and the fix.
        """
        from contextlib import nullcontext

        from datasets import load_dataset
        from datasets.exceptions import DatasetNotFoundError

        from tts import hub

        why = hub.why_unreachable()
        try:
            with hub.quiet_hub_logs(), hub.cache_only() if why else nullcontext():
                ds = load_dataset(hub_id, self.hub_config, split=self.hub_split)
        except ConnectionError as exc:  # datasets' own, and huggingface_hub's OfflineModeIsEnabled
            raise DatasetError(self._unreachable_message(hub_id, why or f"the hub stopped answering ({exc})")) from None
        except DatasetNotFoundError as exc:  # no such dataset, or a gated one without access
            raise DatasetError(f"cannot load the {self.name} benchmark: {exc} {self._data_hint()}") from None
        if why:  # said as a warning only when the user did not choose it (offline mode)
            level = logging.INFO if hub.offline_mode() else logging.WARNING
            logger.log(level, "%s: %s; using the cached copy of %s", self.name, why, hub_id)
        return [(i + 1, dict(r)) for i, r in enumerate(ds)]

    def _unreachable_message(self, hub_id: str, why: str) -> str:
        """The one sentence for a hub copy that is neither reachable nor cached."""
        return (f"cannot load the {self.name} benchmark ({hub_id} on the Hugging Face hub): {why}, and no copy "
                "is in the cache; download it once where the hub can be reached (HF_HUB_OFFLINE=1 then reads the "
                f"cached copy), or {self._data_hint(lead=False)}")

    def _data_hint(self, lead: bool = True) -> str:
        """How to give the problems as a local file instead, with the fields a row needs."""
        q, a = self.question_fields, self.answer_fields
        return (f"{'Pass' if lead else 'pass'} --data PATH: a JSONL or Parquet file, one problem per row with "
                f"a {q[0]!r} (or {' / '.join(map(repr, q[1:]))}) field and an {a[0]!r} "
                f"(or {' / '.join(map(repr, a[1:]))}) field (other names: --question-field, --answer-field).")

    def load(
        self,
        path: Path | None = None,
        limit: int | None = None,
        id_field: str | None = None,
        question_field: str | None = None,
        answer_field: str | None = None,
    ) -> list[Problem]:
        """Load problems from the hub (``path`` None) or a local file.

        Args:
            path: Local JSONL / Parquet / saved-dataset directory overriding the hub copy.
            limit: Keep the first ``limit`` problems.
            id_field, question_field, answer_field: Field names overriding the defaults.

        Raises:
            DatasetError: Missing file, invalid JSON, a row without a question or answer field,
                or duplicate ids.
        """
        source, rows = self._rows(path)
        problems: list[Problem] = []
        seen: set[str] = set()
        for lineno, row in rows:
            q_name = question_field or _pick(row, self.question_fields)
            a_name = answer_field or _pick(row, self.answer_fields)
            if q_name is None or q_name not in row:
                raise DatasetError(
                    f"{source}, line {lineno}: no question field (looked for "
                    f"{question_field or ', '.join(self.question_fields)}; the row has "
                    f"{', '.join(row) or 'no fields'}). Name it with --question-field."
                )
            if a_name is None or a_name not in row or row[a_name] is None:
                raise DatasetError(
                    f"{source}, line {lineno}: no answer field (looked for "
                    f"{answer_field or ', '.join(self.answer_fields)}; the row has "
                    f"{', '.join(row)}). Name it with --answer-field."
                )
            i_name = id_field or _pick(row, self.id_fields)
            pid = str(row[i_name]) if i_name and i_name in row else f"{self.name}-{lineno}"
            if pid in seen:
                raise DatasetError(f"{source}, line {lineno}: duplicate problem id {pid!r}; ids must be unique.")
            seen.add(pid)
            meta = {k: v for k, v in row.items() if k not in (q_name, a_name) and isinstance(v, (str, int, float, bool))}
            problems.append(Problem(pid, str(row[q_name]), self.clean_answer(row[a_name]), meta))
            if limit is not None and len(problems) >= limit:
                break
        if not problems:
            raise DatasetError(f"{source} holds no problems.")
        return problems


class GeneratedBenchmark(Benchmark):
    """A built-in benchmark whose problems :meth:`generate` makes (deterministic, offline):
    ``size`` of them, or the first ``limit``; ``path`` (a JSONL file in the same format) is loaded
    instead when given."""

    size: ClassVar[int]

    def generate(self, count: int) -> list[Problem]:
        """The first ``count`` problems."""
        raise NotImplementedError

    def load(self, path: Path | None = None, limit: int | None = None, *fields: Any, **named: Any) -> list[Problem]:
        if path is not None:
            return super().load(path, limit, *fields, **named)
        if limit is not None and limit < 1:
            raise DatasetError(f"--limit must be at least 1, got {limit}")
        return self.generate(limit or self.size)


class FileBenchmark(Benchmark):
    """Any JSONL / Parquet / saved HF dataset given with ``--data``."""

    name = "jsonl"


class MATH500(Benchmark):
    """MATH-500 (Lightman et al., 2023), the PRM800K test split of MATH."""

    name = "math500"
    hub_id = "HuggingFaceH4/MATH-500"


class AIME2024(Benchmark):
    """AIME 2024, 30 problems with integer answers 0-999."""

    name = "aime2024"
    hub_id = "HuggingFaceH4/aime_2024"
    hub_split = "train"


class AIME2025(Benchmark):
    """AIME 2025 I and II, 30 problems."""

    name = "aime2025"
    hub_id = "yentinglin/aime_2025"
    hub_split = "train"


class AMC2023(Benchmark):
    """AMC 2023, 40 problems."""

    name = "amc2023"
    hub_id = "math-ai/amc23"


class GSM8K(Benchmark):
    """GSM8K test split (Cobbe et al., 2021): grade-school word problems, answer after ####."""

    name = "gsm8k"
    hub_id = "openai/gsm8k"
    hub_config = "main"

    def clean_answer(self, raw: Any) -> str:
        text = str(raw)
        return text.split("####")[-1].strip().replace(",", "") if "####" in text else text.strip()
