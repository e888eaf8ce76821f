import pytest

from twin.cfn import Deployment, Resolver, TemplateError
from twin.demo import _compress

TEMPLATE = {
    "Parameters": {
        "Layer": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/aws/x"},
        "Size": {"Type": "Number", "Default": "8"},
    },
    "Conditions": {"Big": {"Fn::Equals": [{"Ref": "Size"}, "8"]}},
    "Resources": {
        "Fn": {"Type": "AWS::Lambda::Function", "Properties": {}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
    },
}


def _resolver() -> Resolver:
    d = Deployment(stack_name="Stack", region="us-east-1", account="123456789012")
    d.physical["Fn"] = "Stack-Fn"
    d.arns["Fn"] = "arn:aws:lambda:us-east-1:123456789012:function:Stack-Fn"
    return Resolver(TEMPLATE, d, Resolver.parameter_values(TEMPLATE))


def test_intrinsics_resolve_to_the_twins_ids() -> None:
    r = _resolver()
    assert r.resolve({"Fn::Join": ["", ['{"a":"', {"Fn::GetAtt": ["Fn", "Arn"]}, '"}']]}) == (
        '{"a":"arn:aws:lambda:us-east-1:123456789012:function:Stack-Fn"}'
    )
    assert (
        r.resolve({"Fn::Sub": "${AWS::Region}/${Fn}/${!Literal}"})
        == "us-east-1/Stack-Fn/${Literal}"
    )
    assert r.resolve({"Fn::Select": [1, {"Fn::GetAZs": ""}]}) == "us-east-1b"
    assert r.resolve({"Fn::If": ["Big", "yes", "no"]}) == "yes"
    assert r.resolve({"Ref": "Layer"}) == "twin-unresolved-ssm-parameter:/aws/x"
    assert r.resolve({"Fn::GetAtt": ["Queue", "Arn"]}).startswith("arn:aws:sqs:us-east-1:")


def test_unknown_references_and_functions_fail_with_their_name() -> None:
    r = _resolver()
    with pytest.raises(TemplateError, match="Nope"):
        r.resolve({"Ref": "Nope"})
    with pytest.raises(TemplateError, match="Fn::ImportValue"):
        r.resolve({"Fn::ImportValue": "x"})


def test_poll_loops_are_shown_once_with_a_count() -> None:
    states = ["A", "W", "C", "W", "C", "W", "C", "D"]
    assert _compress(states) == ["A", "(W > C) x3", "D"]
