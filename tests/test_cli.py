"""The README's main job, in process: the embedded pair, AR vs a speculative method.

`specjax generate` exits 1 if the speculative continuation differs from AR, so exit code 0
is the end-to-end losslessness check of the shipped command.
"""

import pytest

from specjax.cli import main


@pytest.mark.parametrize("method", ["chain", "fixed"])
def test_generate_command_matches_ar_on_the_embedded_pair(method, capsys):
    assert main(["generate", "--method", method, "--prompt", "The river flows through the", "--max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "[AR greedy]" in out and "identical to AR: True" in out and "mean accepted length" in out
