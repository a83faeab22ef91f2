"""A real chromium for the console's tests: Debian's build driven by Playwright (Playwright's
own browser download is not used). Missing, the tests skip, except in CI, where it is an
error: `.ci/run` installs it."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright

__all__ = ["chromium", "chromium_path"]


def chromium_path() -> str | None:
    return os.environ.get("LTM_CHROMIUM") or shutil.which("chromium")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    path = chromium_path()
    if path is None:
        message = "chromium is not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # As root, chromium's sandbox cannot start: the tests' pages are the console's own.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=path, args=args)
        try:
            yield browser
        finally:
            await browser.close()
