#!/usr/bin/env python3
"""Sets up a moto server (started with INITIAL_NO_AUTH_ACTION_COUNT=5) for the
s3:// remote's tests with strict authentication, through boto3 (which
moto[server] brings):

moto_setup.py ENDPOINT setup OUTDIR BUCKET
    the first 5 actions, before moto checks anything: an IAM user "kiln" with
    an access key and a policy allowing s3:* and sts:*, a role "kiln-role"
    that the user may assume (sts:AssumeRole) and a web identity may assume
    (sts:AssumeRoleWithWebIdentity), with the same policy. Then, signed as the
    user, the bucket. Writes OUTDIR/user (AK SK) and OUTDIR/role (its ARN).
moto_setup.py ENDPOINT assume OUTDIR NAME
    signed as the user: sts:AssumeRole of the role; writes OUTDIR/NAME
    (AK SK TOKEN), temporary credentials that need x-amz-security-token.
"""
import json
import os
import sys

import boto3

POLICY = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}]})


def client(endpoint, service, ak="setup", sk="setup"):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=ak, aws_secret_access_key=sk)


def write(path, *words):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(" ".join(words) + "\n")
    os.replace(tmp, path)


def main():
    endpoint, what, out = sys.argv[1:4]
    if what == "setup":
        iam = client(endpoint, "iam")
        iam.create_user(UserName="kiln")
        key = iam.create_access_key(UserName="kiln")["AccessKey"]
        iam.put_user_policy(UserName="kiln", PolicyName="all", PolicyDocument=POLICY)
        trust = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:user/kiln"},
             "Action": "sts:AssumeRole"},
            {"Effect": "Allow",
             "Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/kiln.test"},
             "Action": "sts:AssumeRoleWithWebIdentity"}]})
        role = iam.create_role(RoleName="kiln-role", AssumeRolePolicyDocument=trust)["Role"]
        iam.put_role_policy(RoleName="kiln-role", PolicyName="all", PolicyDocument=POLICY)
        # from here on moto checks every signature and policy
        client(endpoint, "s3", key["AccessKeyId"], key["SecretAccessKey"]).create_bucket(
            Bucket=sys.argv[4])
        write(os.path.join(out, "user"), key["AccessKeyId"], key["SecretAccessKey"])
        write(os.path.join(out, "role"), role["Arn"])
    elif what == "assume":
        with open(os.path.join(out, "user")) as f:
            ak, sk = f.read().split()
        with open(os.path.join(out, "role")) as f:
            arn = f.read().strip()
        c = client(endpoint, "sts", ak, sk).assume_role(
            RoleArn=arn, RoleSessionName=sys.argv[4])["Credentials"]
        write(os.path.join(out, sys.argv[4]), c["AccessKeyId"], c["SecretAccessKey"],
              c["SessionToken"])
    else:
        sys.exit("moto_setup.py: setup or assume, not %s" % what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
