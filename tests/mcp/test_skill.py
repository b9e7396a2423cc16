"""The agent skill (skills/tao-slurm/SKILL.md): valid front matter, and every command, flag, tool,
argument, result field and setting it names exists (as the CLI's help, the server's tools/list and the
settings table in docs/configuration.md say)."""

import json
import re
import subprocess
import tomllib

import yaml
from conftest import connect, run_async
from tao_test_support import REPO, binary

SKILL = REPO / "skills" / "tao-slurm" / "SKILL.md"
# Fields of a tool error result (error results have no output schema).
ERROR_FIELDS = {"field", "error"}


def skill_text() -> tuple[dict, str]:
    text = SKILL.read_text()
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert match, "SKILL.md must start with YAML front matter between --- lines"
    front = yaml.safe_load(match.group(1))
    assert isinstance(front, dict), front
    return front, match.group(2)


def code_spans(body: str) -> list[str]:
    """Inline `code` spans, outside fenced blocks."""
    outside = re.sub(r"^```.*?^```", "", body, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", outside)


def help_text(*args: str) -> str:
    return subprocess.run([binary(), *args, "--help"], capture_output=True, text=True, check=True).stdout


def subcommands(help_output: str) -> set[str]:
    section = help_output.split("Commands:", 1)[1].split("\n\n", 1)[0] if "Commands:" in help_output else ""
    return {line.split()[0] for line in section.splitlines() if line.strip()} - {"help"}


def test_front_matter_is_valid():
    front, body = skill_text()
    assert front["name"] == SKILL.parent.name == "tao-slurm"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", front["name"]) and len(front["name"]) <= 64
    description = front["description"]
    assert isinstance(description, str) and 50 <= len(description) <= 1024, description
    assert "Slurm" in description and "Use when" in description
    assert set(front) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    # Short: agents pay for every token of it.
    assert len(body.split()) < 1200, len(body.split())


def test_every_cli_command_and_flag_it_names_exists():
    _, body = skill_text()
    top = subcommands(help_text())
    named = re.findall(r"\btao-slurm ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", body)
    assert named, "the skill names CLI commands"
    for words in named:
        first, *rest = words.split()
        assert first in top, f"tao-slurm {first} is not a command ({sorted(top)})"
        nested = subcommands(help_text(first))
        if nested:
            assert rest and rest[0] in nested, f"tao-slurm {words}: {first} takes one of {sorted(nested)}"
    all_help = "\n".join([help_text()] + [help_text(c) for c in top])
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", " ".join(code_spans(body))):
        assert flag in all_help, f"{flag} is not a flag of any command"


def test_the_codex_config_starts_the_server():
    _, body = skill_text()
    blocks = re.findall(r"^```toml\n(.*?)^```", body, flags=re.S | re.M)
    assert len(blocks) == 1, blocks
    server = tomllib.loads(blocks[0])["mcp_servers"]["tao-slurm"]
    assert server["command"] == "tao-slurm" and server["args"] == ["mcp"]
    assert server["tool_timeout_sec"] > 300, "longer than the longest wait"
    assert "claude mcp add tao-slurm -- tao-slurm mcp" in body


def property_names(schema) -> set[str]:
    names = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                names |= set(value)
            names |= property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            names |= property_names(item)
    return names


@run_async
async def test_every_tool_argument_and_field_it_names_exists(server_env):
    async with connect(server_env) as s:
        tools = {t.name: t for t in (await s.client.list_tools()).tools}
    inputs = {name: set(t.input_schema.get("properties", {})) for name, t in tools.items()}
    outputs = set().union(*(property_names(t.output_schema) for t in tools.values()))
    known = set(tools) | set().union(*inputs.values()) | outputs | ERROR_FIELDS | subcommands(help_text())
    _, body = skill_text()
    spans = code_spans(body)
    calls = 0
    for span in spans:
        call = re.fullmatch(r"([a-z_]+) (\{.*\})", span)
        if call:
            tool, args = call.group(1), json.loads(call.group(2))
            assert tool in tools, f"`{span}`: {tool} is not a tool"
            unknown = set(args) - inputs[tool]
            assert not unknown, f"`{span}`: {tool} takes no {unknown}"
            calls += 1
        elif re.fullmatch(r"[a-z][a-z0-9_]*", span):
            assert span in known, f"`{span}` is no tool, argument, result field or command"
    assert calls >= 4, "the skill shows tool calls with their arguments"
    mentioned = {span.split()[0] for span in spans}
    assert set(tools) <= mentioned, f"tools the skill never mentions: {set(tools) - mentioned}"


def test_every_setting_it_names_is_in_the_settings_table():
    readme = (REPO / "docs/configuration.md").read_text()
    table = {m for m in re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", readme, flags=re.M)}
    _, body = skill_text()
    settings = [s for s in code_spans(body) if re.fullmatch(r"[A-Z][A-Z0-9_]+", s)]
    assert "SLURM_USER" in settings and "SSH_KEY_PATH" in settings
    for name in settings:
        assert name in table, f"`{name}` is not a setting in docs/configuration.md's table"
