use super::*;

fn refused(refusal: Refusal) -> Report {
    Report::new(
        Program::MemberGuard,
        Outcome::Refused(refusal),
        "identity marker disagrees: cluster token is a-1 on the volume but a-2 is expected for member a-0",
    )
}

#[test]
fn every_report_reads_back_as_written() {
    let mut reports: Vec<Report> = Refusal::ALL.into_iter().map(refused).collect();
    for program in Program::ALL {
        reports.push(Report::new(program, Outcome::Failed, "reading /x: denied"));
    }
    for report in reports {
        let message = report.termination_message();
        assert_eq!(
            Reading::of_termination_message(&message),
            Reading::Report(report.clone()),
            "{message}"
        );
        assert!(Reading::of_termination_message(&message).is_from(report.program));
    }
}

#[test]
fn the_json_line_has_the_documented_fields() -> Result<(), serde_json::Error> {
    let line = refused(Refusal::ForeignCluster).json_line();
    let fields: Value = serde_json::from_str(&line)?;
    assert_eq!(fields["version"], 1);
    assert_eq!(fields["program"], "member-guard");
    assert_eq!(fields["outcome"], "refused");
    assert_eq!(fields["refusal"], "foreign-cluster");
    assert!(fields["detail"].as_str().is_some_and(|d| d.contains("a-2")));
    assert!(line.starts_with(r#"{"version":1,"program":"member-guard","outcome":"refused","refusal":"foreign-cluster","detail":"#));
    let failed = Report::new(Program::RestoreVolume, Outcome::Failed, "x").json_line();
    let fields: Value = serde_json::from_str(&failed)?;
    assert_eq!(fields["outcome"], "failed");
    assert!(fields.get("refusal").is_none());
    Ok(())
}

#[test]
fn people_read_the_first_line_the_operator_the_last() {
    let report = refused(Refusal::DataLost);
    let message = report.termination_message();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with(LEGACY_REFUSAL_PREFIX), "{}", lines[0]);
    assert!(lines[0].ends_with(&report.detail));
    // The log tail of an etcd container holds earlier runs before it.
    let tail = format!("{{\"level\":\"info\",\"msg\":\"serving\"}}\n{message}");
    assert_eq!(
        Reading::of_termination_message(&tail),
        Reading::Report(report)
    );
}

#[test]
fn details_are_one_line_of_bounded_size() -> Result<(), serde_json::Error> {
    let long = "é".repeat(2 * MAX_DETAIL_BYTES);
    let report = Report::new(Program::RestoreVolume, Outcome::Failed, &long);
    assert!(report.detail.len() <= MAX_DETAIL_BYTES + '…'.len_utf8());
    assert!(report.json_line().len() < 2048);
    let report = Report::new(Program::RestoreVolume, Outcome::Failed, "a\nb\r\n  c");
    assert_eq!(report.detail, "a b c");
    assert_eq!(report.termination_message().lines().count(), 2);
    // Quotes, backslashes and control characters are escaped.
    let report = Report::new(Program::MemberGuard, Outcome::Failed, "a \"b\" \\c \u{7}");
    let fields: Value = serde_json::from_str(&report.json_line())?;
    assert_eq!(fields["detail"], "a \"b\" \\c \u{7}");
    Ok(())
}

#[test]
fn a_future_version_is_unrecognised_not_misread() {
    let message = r#"{"version":2,"program":"member-guard","outcome":"refused","refusal":"data-lost","detail":"gone"}"#;
    let reading = Reading::of_termination_message(message);
    assert_eq!(
        reading,
        Reading::Unrecognised(UnrecognisedReport {
            program: Some("member-guard".into()),
            unknown: Unknown::Version("2".into()),
            detail: "gone".into(),
        })
    );
    assert!(reading.is_from(Program::MemberGuard));
    assert!(!reading.is_from(Program::RestoreVolume));
    assert!(reading.text().contains("version 2"), "{}", reading.text());
    assert!(reading.text().ends_with("gone"));
}

#[test]
fn an_unknown_refusal_outcome_or_program_is_unrecognised() {
    let unknown = |message: &str| match Reading::of_termination_message(message) {
        Reading::Unrecognised(report) => Some(report.unknown),
        _ => None,
    };
    assert_eq!(
        unknown(
            r#"{"version":1,"program":"member-guard","outcome":"refused","refusal":"bit-rot"}"#
        ),
        Some(Unknown::Refusal("bit-rot".into()))
    );
    assert_eq!(
        unknown(r#"{"version":1,"program":"member-guard","outcome":"refused"}"#),
        Some(Unknown::Refusal(String::new()))
    );
    assert_eq!(
        unknown(r#"{"version":1,"program":"member-guard","outcome":"paused"}"#),
        Some(Unknown::Outcome("paused".into()))
    );
    assert_eq!(
        unknown(r#"{"version":1,"program":"defrag","outcome":"failed"}"#),
        Some(Unknown::Program("defrag".into()))
    );
    assert_eq!(
        unknown(r#"{"version":"one","program":"member-guard"}"#),
        Some(Unknown::Version("one".into()))
    );
    // Fields added within a version are ignored.
    assert!(matches!(
        Reading::of_termination_message(
            r#"{"version":1,"program":"restore-volume","outcome":"failed","step":"replay","detail":"x"}"#
        ),
        Reading::Report(Report {
            outcome: Outcome::Failed,
            ..
        })
    ));
}

#[test]
fn an_old_plain_text_refusal_is_text_from_the_guard() {
    let old = "member-guard refused: data dir is empty but the marker says etcd ran here as member a-0: its data is lost, replace the member\n";
    let reading = Reading::of_termination_message(old);
    assert_eq!(reading, Reading::Text(old.trim().to_owned()));
    assert!(reading.is_from(Program::MemberGuard));
    assert_eq!(reading.text(), old.trim());
}

#[test]
fn other_lines_are_text_from_no_program() {
    for line in [
        "panic: raft: tocommit(54) is out of range",
        r#"{"level":"fatal","msg":"failed to start etcd"}"#,
        "{not json",
        "[1,2]",
    ] {
        let reading = Reading::of_termination_message(line);
        assert_eq!(reading, Reading::Text(line.to_owned()));
        assert!(Program::ALL.into_iter().all(|p| !reading.is_from(p)));
    }
    assert_eq!(Reading::of_termination_message(""), Reading::Empty);
    assert_eq!(Reading::of_termination_message(" \n\n"), Reading::Empty);
}

#[test]
fn names_are_unique_and_read_back() {
    for refusal in Refusal::ALL {
        assert_eq!(Refusal::from_name(refusal.name()), Some(refusal));
    }
    for program in Program::ALL {
        assert_eq!(Program::from_name(program.name()), Some(program));
    }
    assert_eq!(Refusal::from_name("Data-Lost"), None);
}
