from __future__ import annotations

from pathlib import Path

import pytest

from whyjob.core.errors import ConfigError
from whyjob.core.settings import default_index_path, load_settings


def test_defaults_follow_xdg(tmp_path: Path) -> None:
    settings = load_settings(environ={})
    assert settings.index == default_index_path()
    assert settings.index == tmp_path / "data" / "whyjob" / "index.sqlite"
    assert settings.config_path is None


def test_config_file_then_environment(tmp_path: Path) -> None:
    config = tmp_path / "whyjob.yaml"
    config.write_text(
        "index: /srv/whyjob/index.sqlite\n"
        "cluster: gpu-east\n"
        "experiments:\n"
        "  labels: [team.example.com/run]\n"
        "  launchers:\n"
        "    - {name: Sweep, label: sweep.example.com/name, rank_labels: [sweep.example.com/trial]}\n"
        "rules:\n"
        "  paths: [my-rules]\n"
        "logs:\n"
        "  checkpoint: ['ckpt-sync done (?P<step>\\d+)']\n"
    )
    settings = load_settings(config, environ={"WHYJOB_CLUSTER": "gpu-west"})
    assert settings.index == Path("/srv/whyjob/index.sqlite")
    assert settings.cluster == "gpu-west"  # the environment beats the file
    assert [launcher.label for launcher in settings.launchers[:2]] == [
        "team.example.com/run",
        "sweep.example.com/name",
    ]
    assert settings.rule_paths == (tmp_path / "my-rules",)
    assert settings.log_markers == {"checkpoint": ("ckpt-sync done (?P<step>\\d+)",)}
    assert load_settings(config, environ={"WHYJOB_INDEX": "/tmp/x.sqlite"}).index == Path(
        "/tmp/x.sqlite"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("indx: /x\n", "unknown key 'indx'"),
        ("experiments:\n  lables: [a]\n", "unknown key experiments.lables"),
        ("experiments:\n  launchers:\n    - {name: A}\n", "needs a name and a label"),
        ("index: [\n", "not valid YAML"),
        ("- a list\n", "top level must be a mapping"),
        ("logs:\n  checkpoint: ['(unclosed']\n", "logs.checkpoint: bad regex"),
        ("logs:\n  steps: [x]\n", "unknown key logs.steps"),
        # index: and ingest: are checked by hand (no pydantic on the CLI's start), same wording.
        ("ingest:\n  max_line: 64KB\n", r"bad.yaml:2: ingest.max_line: '64KB' is not a size"),
        ("index:\n  backend: es\n", r"bad.yaml:2: index.backend takes one of \['sqlite'"),
        ("index:\n  urls: https://es\n", r"bad.yaml:2: index.urls takes a list of names"),
        ("index:\n  prefx: x\n", r":2: unknown key 'prefx' in index \(did you mean 'prefix'\?\)"),
    ],
)
def test_bad_config_names_the_file_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings(config, environ={})
    assert str(config) in str(raised.value)


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_settings(tmp_path / "nope.yaml", environ={})


def test_the_es_url_from_the_environment_keeps_the_files_credentials(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "index:\n  backend: elasticsearch\n  urls: [https://es-0:9200]\n  username: whyjob\n"
        "  password: from-file\n  ca_certs: ca.pem\n  prefix: gpu\n"
    )
    env = {"WHYJOB_ES_URL": "https://es-a:9200,https://es-b:9200", "WHYJOB_ES_PASSWORD": "env"}
    elastic = load_settings(config, environ=env).elastic
    assert elastic is not None
    assert elastic.urls == ["https://es-a:9200", "https://es-b:9200"]
    assert (elastic.username, elastic.password, elastic.prefix) == ("whyjob", "env", "gpu")
    assert elastic.ca_certs == tmp_path / "ca.pem"
