"""The SSRF guard: refused schemes and addresses, the allow-list, and the pinned connection."""

import shutil
import socket
import subprocess

import pytest

from tests.webhooks.receiver import Receiver
from webhooks import services, ssrf, transport
from webhooks.errors import UnsafeURL

REFUSED = {
    "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
    "http://10.0.0.1/hook": "10.0.0.1 is a private address",
    "http://192.168.1.10/hook": "private",
    "http://172.16.5.4/hook": "private",
    "http://127.0.0.1:8000/hook": "127.0.0.1 is a loopback address",
    "http://localhost:8000/hook": "localhost resolves to 127.0.0.1, which is a loopback address",
    "http://[::1]/hook": "::1 is a loopback address",
    "http://[::ffff:127.0.0.1]/hook": "loopback",
    "http://[fe80::1]/hook": "link-local",
    "http://[fc00::1]/hook": "private",
    "http://0.0.0.0/hook": "unspecified",
    "http://224.0.0.1/hook": "multicast",
    "http://240.0.0.1/hook": "reserved",
    "http://100.64.0.1/hook": "non-public",
}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/hook", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("https://user:secret@example.com/hook", "credentials"),
        ("http:///hook", "no host"),
        ("http://example.com:99999/", "refused"),
    ],
)
def test_urls_that_are_not_plain_http_are_refused(url, message):
    with pytest.raises(UnsafeURL, match=message):
        ssrf.parse(url)


@pytest.mark.parametrize(("url", "message"), REFUSED.items())
def test_internal_addresses_are_refused(url, message):
    with pytest.raises(UnsafeURL, match=message.replace(".", r"\.")):
        ssrf.guard(url)
    with pytest.raises(UnsafeURL, match=message.replace(".", r"\.")):
        ssrf.check_for_save(url)


@pytest.mark.parametrize("url", ["https://93.184.215.14/hook", "http://[2606:4700::1111]:8080/"])
def test_public_addresses_pass(url):
    target, address = ssrf.guard(url)
    assert str(address) in url and target.path in ("/hook", "/")


def test_the_allow_list_lets_listed_networks_through_and_nothing_else(settings):
    settings.CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS = "10.0.0.0/8, 127.0.0.1/32"
    ssrf.guard("http://10.1.2.3/hook")
    ssrf.guard("http://127.0.0.1:9/hook")
    with pytest.raises(UnsafeURL, match="127.0.0.2 is a loopback"):
        ssrf.guard("http://127.0.0.2/hook")
    with pytest.raises(UnsafeURL, match="169.254.169.254"):
        ssrf.guard("http://169.254.169.254/")


def test_allow_private_turns_the_address_check_off_but_not_the_scheme_check(settings):
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    ssrf.guard("http://169.254.169.254/")
    ssrf.guard("http://localhost/")
    with pytest.raises(UnsafeURL):
        ssrf.guard("file:///etc/passwd")


def fake_resolver(monkeypatch, answers: dict[str, list]):
    """Make getaddrinfo answer ``answers[host]`` (popping one list per call) for fake names."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            return real(host, port, *args, **kwargs)
        addresses = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_name_is_refused_if_any_of_its_addresses_is_internal(monkeypatch):
    fake_resolver(monkeypatch, {"mixed.example": [["93.184.215.14", "10.0.0.7"]]})
    with pytest.raises(UnsafeURL, match="mixed.example resolves to 10.0.0.7"):
        ssrf.guard("https://mixed.example/hook")


def test_a_name_that_does_not_resolve_can_be_saved_and_fails_at_delivery(monkeypatch):
    fake_resolver(monkeypatch, {"later.example": [[]]})
    assert ssrf.check_for_save("https://later.example/hook").host == "later.example"
    with pytest.raises(socket.gaierror):
        ssrf.guard("https://later.example/hook")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/", "http://10.0.0.1/", "http://localhost/"]
)
def test_saving_a_refused_url_fails_with_the_delivery_time_message(url):
    with pytest.raises(UnsafeURL) as at_delivery:
        ssrf.guard(url)
    with pytest.raises(UnsafeURL) as at_save:
        services.endpoint_create(url=url, topics=["job.dead"], actor="test")
    assert str(at_save.value) == str(at_delivery.value)
    endpoint = services.endpoint_create(url="https://93.184.215.14/", topics=["job.dead"])
    with pytest.raises(UnsafeURL, match="link-local"):
        services.endpoint_update(endpoint_id=endpoint.pk, url="http://169.254.169.254/", actor="t")
    endpoint.refresh_from_db()
    assert endpoint.url == "https://93.184.215.14/"


def test_the_connection_goes_to_the_checked_address_not_a_fresh_lookup(monkeypatch, settings):
    """DNS rebinding: the name answers 127.0.0.1 (allowed) first and 10.9.9.9 afterwards."""
    settings.CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS = "127.0.0.1/32"
    receiver = Receiver()
    try:
        fake_resolver(monkeypatch, {"hooks.example": [["127.0.0.1"], ["10.9.9.9"]]})
        target, address = ssrf.guard(f"http://hooks.example:{receiver.port}/in?x=1")
        assert socket.getaddrinfo("hooks.example", 80)[0][4][0] == "10.9.9.9"  # re-bound
        answer = transport.post(
            target, address, body=b"{}", headers={"X-Test": "1"}, timeout=5, excerpt_bytes=4096
        )
        assert answer.status == 200 and answer.body == b"ok"
        (request,) = receiver.received()
        assert request.path == "/in?x=1"
        assert request.header("Host") == f"hooks.example:{receiver.port}"
        assert request.header("X-Test") == "1"
    finally:
        receiver.close()


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for hooks.example (needs the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.example"]
        + ["-addext", "subjectAltName=DNS:hooks.example"],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def test_https_to_a_pinned_address_sends_sni_and_verifies_the_host_name(certificate):
    receiver = Receiver(tls=certificate)
    try:
        target = ssrf.parse(f"https://hooks.example:{receiver.port}/tls")
        address = ssrf.literal_address("127.0.0.1")
        answer = transport.post(
            target,
            address,
            body=b"{}",
            headers={},
            timeout=5,
            excerpt_bytes=64,
            ca_certs=certificate[0],
        )
        assert answer.status == 200
        assert receiver.server_names == ["hooks.example"]
        assert receiver.received()[0].header("Host") == f"hooks.example:{receiver.port}"

        wrong = ssrf.parse(f"https://other.example:{receiver.port}/tls")
        with pytest.raises(transport.TransportError, match="TLS"):
            transport.post(
                wrong,
                address,
                body=b"{}",
                headers={},
                timeout=5,
                excerpt_bytes=64,
                ca_certs=certificate[0],
            )
    finally:
        receiver.close()
