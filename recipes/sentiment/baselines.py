"""The baselines the sentiment classifier is measured against, each fitted on the same
training texts: the majority class, a unigram bag-of-words logistic regression, the
word uni+bigram tf-idf logistic regression of IMDB papers, and Wang & Manning's NBSVM
(naive-Bayes log-count ratios on binarized uni+bigrams, here with a logistic regression:
the strongest cheap linear model on IMDB); and beside them the mean of the recurrent
model's and NBSVM's probabilities, its weight chosen on the validation split, reported
as an ensemble next to the model, never in its place (scikit-learn, imported inside
the functions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rnnkit.recipe import Metrics

if TYPE_CHECKING:
    import numpy as np
    from rnnkit_recipes.sentiment.config import SentimentConfig
    from rnnkit_recipes.sentiment.data import SentimentData

    from rnnkit.data.text import TextSplit


def _majority_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int
) -> np.ndarray:
    """Every test text gets the training class frequencies: the majority class wins."""
    import numpy as np

    frequencies = np.bincount(train.labels, minlength=num_classes) / len(train)
    return np.tile(frequencies, (len(test), 1))


def _one_blas_thread():
    """The baselines fitted on one BLAS thread: their L-BFGS vector updates are
    too small to share out, and a BLAS thread per core made the logistic
    regressions many times slower, the same coefficients to round-off
    (docs/performance.md, "Sentiment baselines")."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def baseline_table(
    data: SentimentData,
    config: SentimentConfig,
    model_probabilities: tuple[np.ndarray, np.ndarray] | None = None,
) -> Metrics:
    """The baselines' test figures, each fitted on the same training texts: the
    majority class, unigram bag-of-words and uni+bigram tf-idf logistic regressions,
    and NBSVM. With `model_probabilities`, the recurrent model's (validation, test)
    class probabilities, also `ensemble_nbsvm`: w x the model's + (1 - w) x NBSVM's
    probabilities, w from `ENSEMBLE_WEIGHTS` chosen on validation accuracy (the row
    records it as `model_weight`)."""
    from rnnkit.metrics import classification_metrics

    text = data.text
    train, test, num_classes = text.train, text.test, text.num_classes
    with _one_blas_thread():
        nbsvm_validation, nbsvm_test = _nbsvm_probabilities(
            train, text.validation, test, num_classes, config
        )
        table = {
            "majority": classification_metrics(
                test.labels, _majority_probabilities(train, test, num_classes)
            ),
            "bag_of_words": classification_metrics(
                test.labels,
                _bag_of_words_probabilities(train, test, num_classes, config),
            ),
            "tfidf_bigrams": classification_metrics(
                test.labels,
                _tfidf_bigram_probabilities(
                    train, text.validation, test, num_classes, config
                ),
            ),
            "nbsvm_bigrams": classification_metrics(test.labels, nbsvm_test),
        }
    if model_probabilities is not None:
        model_validation, model_test = model_probabilities
        weight = _ensemble_weight(
            text.validation.labels, model_validation, nbsvm_validation
        )
        table["ensemble_nbsvm"] = {
            **classification_metrics(
                test.labels, weight * model_test + (1 - weight) * nbsvm_test
            ),
            "model_weight": weight,
        }
    return table


# The model's weights the ensemble with NBSVM chooses from, in order of preference
# when the validation accuracies tie (the plain mean first).
ENSEMBLE_WEIGHTS = (0.5, 0.75, 0.25)


def _ensemble_weight(
    labels: np.ndarray, model: np.ndarray, linear: np.ndarray
) -> float:
    """The weight of the model's probabilities (against the linear model's) that
    classifies the validation split best; ties go to the earlier weight."""
    import numpy as np

    accuracies = [
        float(np.mean((w * model + (1 - w) * linear).argmax(axis=1) == labels))
        for w in ENSEMBLE_WEIGHTS
    ]
    return ENSEMBLE_WEIGHTS[int(np.argmax(accuracies))]


def _bag_of_words_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int, config: SentimentConfig
) -> np.ndarray:
    """A unigram bag-of-words logistic regression (scikit-learn) on the same training
    texts, with the same vocabulary size and lower-casing as the model."""
    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(
        binary=True,
        lowercase=config.data.lowercase,
        max_features=config.data.vocabulary_size,
    )
    features = vectorizer.fit_transform(train.texts)
    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(features, train.labels)
    probabilities = classifier.predict_proba(vectorizer.transform(test.texts))
    # Columns follow classifier.classes_ (the classes seen in training).
    by_class = np.zeros((len(test), num_classes))
    by_class[:, classifier.classes_] = probabilities
    return by_class


# The inverse regularisation strengths the tf-idf baseline chooses from.
TFIDF_C_GRID = (1.0, 4.0, 16.0, 64.0)


def _tfidf_bigram_probabilities(
    train: TextSplit,
    validation: TextSplit,
    test: TextSplit,
    num_classes: int,
    config: SentimentConfig,
) -> np.ndarray:
    """The standard strong linear baseline of IMDB papers: word unigram + bigram tf-idf
    (sublinear term frequency, n-grams seen in at least two training texts) and a
    logistic regression whose C is chosen on the validation split (never the test)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(
        ngram_range=(1, 2),
        min_df=2,
        sublinear_tf=True,
        lowercase=config.data.lowercase,
    )
    features = vectorizer.fit_transform(train.texts)
    best, best_accuracy = None, -1.0
    validation_features = vectorizer.transform(validation.texts)
    for strength in TFIDF_C_GRID:
        classifier = LogisticRegression(C=strength, max_iter=1000)
        classifier.fit(features, train.labels)
        accuracy = classifier.score(validation_features, validation.labels)
        if accuracy > best_accuracy:
            best, best_accuracy = classifier, accuracy
    probabilities = best.predict_proba(vectorizer.transform(test.texts))
    by_class = np.zeros((len(test), num_classes))
    by_class[:, best.classes_] = probabilities
    return by_class


# The inverse regularisation strengths NBSVM chooses from.
NBSVM_C_GRID = (0.1, 0.5, 1.0, 4.0)


def _nbsvm_probabilities(
    train: TextSplit,
    validation: TextSplit,
    test: TextSplit,
    num_classes: int,
    config: SentimentConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """NBSVM (Wang & Manning 2012) in its logistic-regression form: binarized word
    uni+bigram counts (n-grams in at least two training texts), each scaled by its
    naive-Bayes log-count ratio r = log(p / |p|_1) - log(q / |q|_1), where p and q
    are 1 + the feature's counts in the texts of the class and of the others, then a
    logistic regression (liblinear) whose C is chosen on validation accuracy. More
    than two classes: one such model per class against the rest, the probabilities
    normalised. Returns the (validation, test) class probabilities."""
    import numpy as np
    import scipy.sparse
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(
        ngram_range=(1, 2), min_df=2, binary=True, lowercase=config.data.lowercase
    )
    features = vectorizer.fit_transform(train.texts)
    others = (vectorizer.transform(validation.texts), vectorizer.transform(test.texts))
    # Two classes: one model of class 1 against class 0.
    positives = [1] if num_classes == 2 else list(range(num_classes))
    scaled = []
    for k in positives:
        mine = train.labels == k
        p = 1.0 + np.asarray(features[mine].sum(axis=0)).ravel()
        q = 1.0 + np.asarray(features[~mine].sum(axis=0)).ravel()
        ratio = scipy.sparse.diags(np.log(p / p.sum()) - np.log(q / q.sum()))
        scaled.append([x @ ratio for x in (features, *others)])

    def probabilities(strength: float) -> list[np.ndarray]:
        """The (validation, test) class probabilities at C = `strength`."""
        columns = []
        for k, (train_x, *other_x) in zip(positives, scaled, strict=True):
            if not (train.labels == k).any():  # a named class no training text has
                columns.append([np.zeros(x.shape[0]) for x in other_x])
                continue
            classifier = LogisticRegression(C=strength, solver="liblinear")
            classifier.fit(train_x, train.labels == k)
            columns.append([classifier.predict_proba(x)[:, 1] for x in other_x])
        if num_classes == 2:
            return [np.stack([1 - p, p], axis=1) for p in columns[0]]
        out = [np.stack([c[i] for c in columns], axis=1) for i in range(2)]
        return [p / p.sum(axis=1, keepdims=True) for p in out]

    best, best_accuracy = None, -1.0
    for strength in NBSVM_C_GRID:
        found = probabilities(strength)
        accuracy = float(np.mean(found[0].argmax(axis=1) == validation.labels))
        if accuracy > best_accuracy:
            best, best_accuracy = found, accuracy
    return best[0], best[1]
