"""The application layer of model-catalog: the `catalog` command line, the warm resolve, the pytest plugin
and everything that renders output (text, JSON, markdown, progress).

It builds one `catalog.settings.Settings` per invocation and passes it down to `resolver/` (I/O) and
`catalog/` (the declarative core); nothing below imports from here (a test checks the direction).
"""
