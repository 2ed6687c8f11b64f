"""Building the candidate: trimmed compiler errors, checked signature, validated cflags."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalResult
from conftest import SEED, mutate

from avo_target_attention_c.build import BuildError, compile_kernel, read_cflags

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]


def test_compile_error_comes_back_trimmed_to_file_and_line(candidate: Make, evaluate: Eval,
                                                           tmp_path: Path) -> None:
    broken = mutate("            float sum = 0.0f;\n", "            float sum = undeclared_thing;\n")
    line = broken.splitlines().index("            float sum = undeclared_thing;") + 1
    result = evaluate(candidate(broken))
    assert not result.correct and result.error is not None
    assert result.error.startswith("kernel.c does not compile:")
    assert f"kernel.c:{line}:" in result.error and "undeclared_thing" in result.error
    assert "avo-attention-c-" not in result.error  # the private build path is stripped
    assert len(result.error) < 1000
    # the full compiler output, command included, is in the log folder
    logs = list((tmp_path / "logs").glob("attention_c-*-build.log"))
    assert logs and "-include avo_attention.h" in logs[0].read_text()


def test_many_errors_are_cut_to_the_first_three(candidate: Make, tmp_path: Path) -> None:
    broken = SEED + "\n" + "\n".join(f"int bad{i} = missing{i};" for i in range(12)) + "\n"
    with pytest.raises(BuildError) as info:
        compile_kernel(candidate(broken), tmp_path / "build")
    message = info.value.message
    assert message.count("error:") == 3
    assert "more errors; full compiler output in the evaluation log" in message
    assert info.value.full.count("error:") >= 12


def test_a_different_signature_is_a_compile_error(candidate: Make, tmp_path: Path) -> None:
    wrong = mutate("int heads, int n, int d, int causal)\n{", "int heads, int n, int d)\n{")
    with pytest.raises(BuildError) as info:
        compile_kernel(candidate(wrong), tmp_path / "build")
    assert "conflicting types for 'attention'" in info.value.message


def test_a_missing_kernel_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no kernel.c in the candidate"):
        compile_kernel(tmp_path, tmp_path / "build")


def test_a_kernel_using_an_undefined_function_fails_at_link_time(candidate: Make, tmp_path: Path) -> None:
    # Without -Wl,-z,defs this would build and only fail when loaded.
    broken = at_top("void helper_not_defined(void);") .replace(
        "    free(scores);\n}", "    helper_not_defined();\n    free(scores);\n}")
    with pytest.raises(BuildError) as info:
        compile_kernel(candidate(broken), tmp_path / "build")
    assert "undefined reference to `helper_not_defined'" in info.value.message


def at_top(decl: str) -> str:
    return mutate("#include <stdlib.h>\n", f"#include <stdlib.h>\n{decl}\n")


@pytest.mark.parametrize("flags, problem", [
    ("-o /tmp/elsewhere.so", "'-o' is not allowed"),
    ("-fplugin=evil.so", "'-fplugin=evil.so' is not allowed"),
    ("@response.txt", "'@response.txt' is not a compiler flag"),
    ("kernel2.c", "'kernel2.c' is not a compiler flag"),
    ("-DX='unterminated", "cannot split into flags"),
])
def test_bad_cflags_are_rejected_with_the_flag_named(tmp_path: Path, flags: str, problem: str) -> None:
    (tmp_path / "cflags.txt").write_text(flags)
    with pytest.raises(BuildError) as info:
        read_cflags(tmp_path)
    assert problem in info.value.message


def test_cflags_allow_comments_and_several_lines(tmp_path: Path) -> None:
    (tmp_path / "cflags.txt").write_text("-O2 -march=native  # the host's ISA\n-fopenmp\n")
    assert read_cflags(tmp_path) == ["-O2", "-march=native", "-fopenmp"]


def test_openmp_kernel_builds_and_passes(candidate: Make, evaluate: Eval) -> None:
    threaded = mutate("    for (int h = 0; h < heads; h++) {", "    for (int h = 0; h < heads; h++) {\n"
                      "        float *scores = malloc((size_t)n * sizeof(float));")
    threaded = mutate("        }\n    }\n    free(scores);",
                      "        }\n        free(scores);\n    }\n    free(scores);", threaded)
    threaded = mutate("    for (int h = 0; h < heads; h++) {", "    #pragma omp parallel for\n"
                      "    for (int h = 0; h < heads; h++) {", threaded)
    result = evaluate(candidate(threaded, cflags="-fopenmp"))
    assert result.correct, result.error
