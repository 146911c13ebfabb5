"""`speculab-report` (`report.cli`): a sweep's finished point runs, read back from MLflow (`points`),
laid out as the papers' tables (`tables`, `layout`), written as markdown, CSV and console tables
(`render`) and plotted (`figures`)."""
