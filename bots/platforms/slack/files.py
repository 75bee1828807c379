"""Files shared with a Slack message, downloaded for the runner.

Owns: `FileFetcher`, which downloads each file's `url_private_download` with the bot token and
turns it into an `Attachment` (the runner then inlines images for the model and saves other
files in the channel workspace, `bots.attachments`), or into a one-line reason it could not.

Why each rule:
- Files are fetched only from Slack's own hosts (`*.slack.com`, https) or the configured
  Slack-compatible server, with the bot token; redirects are followed by hand, so the token
  never rides along to another host.
- Without a valid token (or the `files:read` scope) Slack answers with its HTML sign-in page
  and status 200; that page is detected and reported, never saved as the file.
- Sizes are bounded per file and per message, from the declared size before downloading and by
  counting while streaming, and at most `MAX_CONCURRENT_DOWNLOADS` run at once across
  messages, so large, lying or many files cannot exhaust memory.
- A Slack-compatible server (`SLACK_API_URL` naming another host) serves its files too: file
  URLs on Slack's hosts are fetched from that server's origin, path kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp

from bots.incoming import Attachment
from bots.platforms.slack.events import SlackFile

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 25 * 1024 * 1024
MAX_MESSAGE_BYTES = 50 * 1024 * 1024
MAX_REDIRECTS = 3
MAX_CONCURRENT_DOWNLOADS = 4  # so many messages with files at once cannot exhaust memory
CHUNK_BYTES = 64 * 1024
SLACK_API_URL = "https://slack.com/api/"
LOGIN_PAGE_TEXT = (
    "Slack sent its sign-in page instead of the file (the app may lack the files:read scope)"
)
_HTML_STARTS = (b"<!doctype html", b"<html")


@dataclass(slots=True, frozen=True)
class Fetched:
    """What came of a message's files: the downloads, and a line per file that failed."""

    attachments: tuple[Attachment, ...]
    problems: tuple[str, ...]

    def note(self) -> str:
        """Lines to append to the message so the model (and people) know what is missing."""
        return "".join(f"\n({problem})" for problem in self.problems)


class FileError(Exception):
    """Why one file was not downloaded, written for people."""


class FileFetcher:
    def __init__(
        self,
        token: str,
        *,
        api_url: str | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        timeout_s: float = 60.0,
        max_concurrent: int = MAX_CONCURRENT_DOWNLOADS,
    ) -> None:
        self._token = token
        api = urlsplit(api_url or SLACK_API_URL)
        # Another server than Slack's: it serves the files too (tests, compatible servers).
        self._origin: tuple[str, str] | None = (
            None if _slack_host(api.hostname) else (api.scheme, api.netloc)
        )
        self._max_file_bytes = max_file_bytes
        self._max_message_bytes = max_message_bytes
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_read=min(timeout_s, 30.0))
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(max_concurrent)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, files: Sequence[SlackFile]) -> Fetched:
        attachments: list[Attachment] = []
        problems: list[str] = []
        budget = self._max_message_bytes
        for file in files:
            limit = min(self._max_file_bytes, budget)
            try:
                async with self._slots:
                    data = await self._download(file, limit)
            except FileError as exc:
                log.info("file %s not downloaded: %s", file.id, exc)
                problems.append(f"attached file {file.name!r} could not be downloaded: {exc}")
                continue
            budget -= len(data)
            attachments.append(Attachment(name=file.name, mime_type=file.mimetype, data=data))
        return Fetched(tuple(attachments), tuple(problems))

    async def _download(self, file: SlackFile, limit: int) -> bytes:
        if file.size is not None and file.size > limit:
            raise FileError(f"it is larger than {_mb(limit)}")
        url = self._resolve(file.url_private_download)
        if not self._trusted(url):  # the token goes to Slack only, and so do we
            raise FileError("its address is not on Slack")
        session = self._open()
        for _hop in range(MAX_REDIRECTS + 1):
            headers = {"Authorization": f"Bearer {self._token}"} if self._trusted(url) else {}
            try:
                async with session.get(url, headers=headers, allow_redirects=False) as response:
                    if response.status in (301, 302, 303, 307, 308):
                        location = response.headers.get("Location")
                        if not location:
                            raise FileError("Slack sent a redirect without a target")
                        url = self._resolve(urljoin(url, location))
                        continue
                    if response.status != 200:
                        raise FileError(f"Slack answered HTTP {response.status}")
                    return await self._body(response, file, limit)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise FileError(f"the download failed ({type(exc).__name__})") from None
        raise FileError("too many redirects")

    async def _body(self, response: aiohttp.ClientResponse, file: SlackFile, limit: int) -> bytes:
        expects_html = "html" in file.mimetype.lower()
        if response.content_type == "text/html" and not expects_html:
            raise FileError(LOGIN_PAGE_TEXT)
        declared = response.content_length
        if declared is not None and declared > limit:
            raise FileError(f"it is larger than {_mb(limit)}")
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            received += len(chunk)
            if received > limit:
                raise FileError(f"it is larger than {_mb(limit)}")
            if not chunks and not expects_html and _looks_like_html(chunk):
                raise FileError(LOGIN_PAGE_TEXT)
            chunks.append(chunk)
        return b"".join(chunks)

    def _resolve(self, url: str) -> str:
        parts = urlsplit(url)
        if self._origin is not None and _slack_host(parts.hostname):
            scheme, netloc = self._origin
            return urlunsplit((scheme, netloc, parts.path, parts.query, ""))
        return url

    def _trusted(self, url: str) -> bool:
        parts = urlsplit(url)
        if self._origin is not None and (parts.scheme, parts.netloc) == self._origin:
            return True
        return parts.scheme == "https" and _slack_host(parts.hostname)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session


def _slack_host(host: str | None) -> bool:
    return host is not None and (host == "slack.com" or host.endswith(".slack.com"))


def _looks_like_html(first_chunk: bytes) -> bool:
    return first_chunk.lstrip()[:16].lower().startswith(_HTML_STARTS)


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.0f} MB"
