"""Concrete tools the model can call, each confined to its conversation's workspace.

Who owns what:
- `workspace`: confinement with directory descriptors (`locate`, confined open/replace/walk)
  and the bot's own writes (`write_file_in_workspace`); `truncation`: head/tail limits;
  `content`: text/image/binary by content; `globs`: linear-time glob matching.
- `files`: read, write, edit, ls, find; `grep`: grep (ripgrep, or Python in a killable child
  process, `grep_worker`); `bash`: bash and its
  bubblewrap sandbox; `web_fetch`: web_fetch and its SSRF policy.
- `toolset`: `ToolsConfig` and `build_toolset`, the default toolset from configuration.

Must not: import anything of ours outside `core` (import-linter enforces it).
"""
