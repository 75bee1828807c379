"""The console: a web application for the people who run Teammate (docs/architecture.md,
"Console").

The package, one owner each: `settings` (`[console]`), `roles` (who may see and change),
`sessions` (signed cookies, CSRF tokens), `signin` (Slack and Discord sign-in, one-time
links), `server` (the aiohttp application, its security headers and middlewares, serving it),
`pages_*` (one module per page), `templates/` and `static/` (every asset shipped here).

Must not: name a chat platform's package (it talks to Slack and Discord only through their
public HTTP sign-in endpoints), or write SQL (the store's contract does).
"""
