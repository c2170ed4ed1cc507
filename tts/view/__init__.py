"""Pages a reader opens in a browser: what a strategy did on one problem, and a run's problems.

``tts show RUN PROBLEM --html`` writes one problem's page (:func:`~tts.view.problem.problem_page`)
and ``tts view RUN`` a page per problem and an index that filters them
(:func:`~tts.view.index.write_run_pages`). Every page is one self-contained HTML file: inline CSS,
trees drawn as SVG here in Python, one small inline script (click a node to read its step, filter
and sort the index); nothing is fetched, so a page opens from disk, offline. Every text a model
wrote is escaped (:func:`~tts.view.html.esc`): a sample holding ``</script>`` or ``<img onerror>``
shows as text.
"""

from tts.view.index import write_run_pages
from tts.view.problem import problem_page
from tts.view.runs import ViewError, load_rows, rows_for

__all__ = ["ViewError", "load_rows", "problem_page", "rows_for", "write_run_pages"]
