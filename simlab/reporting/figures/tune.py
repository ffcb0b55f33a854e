"""`simlab tune`'s figures: their captions (the figures are drawn from the study in simlab.tuning.report)."""

CAPTIONS = {
    "optimization_history": "The objective of each feasible trial, in trial order, and the best so far.",
    "param_importances": "Which options matter for the objective: Optuna's importance estimate over the completed "
                         "trials.",
    "slices": "The objective against each option, one panel per option; each dot is a trial.",
    "pareto_front": "Every trial: interactive latency against batch throughput, the required throughput (dashed), "
                    "the production defaults and the chosen options.",
}
