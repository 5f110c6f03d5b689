"""Compares a fixture an oracle just wrote with the checked-in one: the same lines and words, numbers
within a tolerance (the header, which names the torch that wrote it, is not compared).

    compare_fixture.py <checked-in> <generated> <tolerance>
"""
import sys


def main(stored_path, generated_path, tolerance):
    tolerance = float(tolerance)
    stored = [l for l in open(stored_path).read().splitlines() if not l.startswith("#")]
    generated = [l for l in open(generated_path).read().splitlines() if not l.startswith("#")]
    if len(stored) != len(generated):
        sys.exit(f"{generated_path}: {len(generated)} lines, {stored_path} has {len(stored)}")
    worst = 0.0
    for n, (a, b) in enumerate(zip(stored, generated), 1):
        wa, wb = a.split(), b.split()
        if len(wa) != len(wb):
            sys.exit(f"line {n}: {len(wb)} words, the fixture has {len(wa)}")
        for x, y in zip(wa, wb):
            try:
                worst = max(worst, abs(float(x) - float(y)))
            except ValueError:
                if x != y:
                    sys.exit(f"line {n}: '{y}' where the fixture has '{x}'")
    print(f"{generated_path}: {len(stored)} lines, numbers within {worst:.3g} of {stored_path}")
    if worst > tolerance:
        sys.exit(f"differs by {worst} > {tolerance}")


if __name__ == "__main__":
    main(*sys.argv[1:])
