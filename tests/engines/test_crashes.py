"""How an engine's end is said: the usual cause and remedy of each deadly signal."""

from __future__ import annotations

import signal

from llmgw.engines.crashes import Exit, headline, message, summary


def test_sigill_names_the_cpu_and_what_to_do() -> None:
    said = summary("llama-server", Exit(-signal.SIGILL))
    assert said.startswith("llama-server stopped with an illegal instruction (SIGILL): this build uses "
                           "CPU instructions this machine cannot run")
    assert "llmgw doctor" in said and "LLMGW_LLAMA_SERVER" in said


def test_a_kill_is_taken_for_the_out_of_memory_killer_with_memory_advice() -> None:
    said = summary("llama-server", Exit(-signal.SIGKILL))
    assert "out-of-memory killer" in said and "min_memory_gb" in said


def test_another_engine_dying_of_a_signal_gets_what_happened_without_llama_servers_remedies() -> None:
    said = summary("vllm", Exit(-signal.SIGSEGV))
    assert said == ("vllm crashed with a segmentation fault (SIGSEGV): the engine log's last lines "
                    "say why")
    killed = summary("sglang.launch_server", Exit(-signal.SIGKILL))
    assert "out-of-memory killer" in killed and "min_memory_gb" in killed
    assert "llama-server" not in said + killed + summary("vllm", Exit(-signal.SIGILL))


def test_an_unusual_signal_is_named() -> None:
    assert summary("llama-server", Exit(-signal.SIGUSR1)) == "llama-server was stopped by signal SIGUSR1 (10)"


def test_an_exit_code_points_at_the_log() -> None:
    assert summary("llama-server", Exit(1)).startswith("llama-server exited with code 1")


def test_the_message_puts_the_summary_first_then_the_log_path_then_its_last_lines() -> None:
    text = message("llama-server", Exit(-signal.SIGSEGV), "/d/logs/rep-1.log", "a\nb")
    lines = text.splitlines()
    assert "segmentation fault" in lines[0]
    assert lines[1:] == ["engine log: /d/logs/rep-1.log", "last output:", "a", "b"]


def test_an_exit_knows_whether_it_was_an_illegal_instruction() -> None:
    assert Exit(-signal.SIGILL).illegal_instruction
    assert not Exit(-signal.SIGSEGV).illegal_instruction and not Exit(132).illegal_instruction


def test_the_headline_is_what_the_engine_died_of_whatever_was_said_around_it() -> None:
    error = message("llama-server", Exit(-signal.SIGILL), "/d/logs/r.log", "x")
    want = "llama-server stopped with an illegal instruction (SIGILL)"
    assert headline(error) == want
    assert headline(f"restarting after 2 failed start(s) in a row: {error}") == want
    assert headline(f"gave up after 5 failed starts in a row (it starts again when its model or "
                    f"profile changes, or llmgw restarts): {error}") == want
    assert headline(None) == ""
