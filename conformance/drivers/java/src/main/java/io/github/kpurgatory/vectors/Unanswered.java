package io.github.kpurgatory.vectors;

/**
 * A binding call that gave no answer (specs/vectors.md §4): it {@code failed} (threw, with its text), {@code hung}
 * (outlived the per-call limit) or {@code crashed} (took its process down). The instance it ran on is dropped.
 */
final class Unanswered extends java.io.IOException {  // an IOException: StdioBinding's constructor may throw it
    final String outcome;

    Unanswered(String outcome, String text) {
        super(outcome + ": " + text);
        this.outcome = outcome;
    }
}
