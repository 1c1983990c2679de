module github.com/triagegw/triage

go 1.26
