"""The browser UI of the scheduling app: server-rendered pages, refreshed live by htmx."""
