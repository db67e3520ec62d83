"""The ``cntkio`` command line: one module per command, nothing importing back up into :mod:`.main`.

* :mod:`.main`: the parser and the dispatch (``cntkio`` console script, ``python -m cntkio``)
* :mod:`.common`: what the commands share — exit statuses, argument types, ``--progress``, error and JSON output,
  and opening a path as a reader (:func:`.common.open_source`, :func:`.common.open_deserializer`)
* commands: :mod:`.check` (``inspect``, ``validate``), :mod:`.convert`, :mod:`.explain`, :mod:`.stats`, :mod:`.read`
* what they use: :mod:`.inspect_ctf` and :mod:`.inspect_formats` (the reports, per format of
  :mod:`cntkio._src.formats.registry`), :mod:`.report_text` (the reports as text and JSON), :mod:`.distributions`
  (what ``stats`` gathers), :mod:`.plot` (its figure), :mod:`.progress` (progress bars)
"""
