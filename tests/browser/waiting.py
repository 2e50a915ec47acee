"""Wait for a condition in the page without eval: the console's CSP forbids it.

Playwright's ``wait_for_function`` builds its predicate with ``eval`` inside the page, which
a policy without ``'unsafe-eval'`` blocks; ``page.evaluate`` goes through the DevTools
protocol instead, so polling with it works under the console's policy.
"""

import time


def wait_for_js(page, expression: str, timeout: float = 20_000) -> None:
    """Poll ``expression`` in ``page`` until it is truthy, or fail after ``timeout`` ms."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} ms waiting for: {expression}")
        page.wait_for_timeout(100)
