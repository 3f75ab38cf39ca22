"""Headless Chromium (Debian's chromium and chromedriver) through selenium, for pages served on 127.0.0.1."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The machine's network is closed: without these Chromium keeps dialling Google's services.
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]


def executables() -> tuple[str | None, str | None]:
    return shutil.which("chromium"), shutil.which("chromedriver")


@contextmanager
def chromium() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = executables()
    with tempfile.TemporaryDirectory(prefix="npu-rl-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def open_until(driver, url: str, texts: list[str], png: Path, timeout: float = 90) -> str:
    """Load ``url``, wait until the rendered page shows every one of ``texts``, screenshot it; the page text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)

    def text(d) -> str:
        # Card titles wrap at "/" into separate lines: compare with the line breaks taken out.
        return d.find_element(By.TAG_NAME, "body").text.replace("\n", "")

    def shown(d) -> bool:
        body = text(d)
        return all(t in body for t in texts)

    try:
        WebDriverWait(driver, timeout, poll_frequency=1).until(shown)
    except TimeoutException:
        driver.save_screenshot(str(png))
        body = text(driver)
        missing = [t for t in texts if t not in body]
        raise AssertionError(f"{url} never showed {missing} (screenshot {png}); page text: {body[:500]!r}") from None
    driver.save_screenshot(str(png))
    return text(driver)
