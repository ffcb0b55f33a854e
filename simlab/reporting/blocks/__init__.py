"""One module per command: its record -> document blocks (tables, sentences, figures), rendered by the Markdown,
HTML and terminal back ends alike, so the command's report.md, what it prints and the `simlab report` page cannot
disagree on a number. A module's `page(record, source)` gives its section of the review page."""
