"""Concrete tools the model can call, each confined to its conversation's workspace.

Who owns what:
- `workspace`: path safety (`resolve_in_workspace`, regular-file open/write); `truncation`:
  head/tail limits; `content`: text/image/binary by content; `globs`: glob matching and walks.
- `files`: read, write, edit, ls, find; `grep`: grep (ripgrep or Python); `bash`: bash and its
  bubblewrap sandbox; `web_fetch`: web_fetch and its SSRF policy.
- `toolset`: `ToolsConfig` and `build_toolset`, the default toolset from configuration.

Must not: import anything of ours outside `core` (import-linter enforces it).
"""
